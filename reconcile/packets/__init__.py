"""Evidence that leaves the provider: the customer's dispute packet (dispute, claims,
isolation, difference, letter) and the operator's diagnostic packet (diagnostic,
packet_sql, story, timeline). Built on reconcile.engine and, for quoted figures,
reconcile.reports; never imported by either."""
