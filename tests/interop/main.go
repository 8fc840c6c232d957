// Command interop checks gpuledger's outputs with Go's golang.org/x/mod/sumdb/note and
// sumdb/tlog, an implementation independent of ours. It reads one JSON request on
// standard input and writes one JSON answer: for each item, ok or the error Go gave.
// tests/test_interop_go.py builds and runs it; nothing here is downloaded.
package main

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

type request struct {
	Vkey        string        `json:"vkey"`
	Notes       []string      `json:"notes"`
	Leaves      []leaf        `json:"leaves"`
	Inclusion   []inclusion   `json:"inclusion"`
	Consistency []consistency `json:"consistency"`
	Sign        *signRequest  `json:"sign"`
	Vkeys       []string      `json:"vkeys"`
}

type leaf struct {
	Data string `json:"data"` // hex: the bytes hashed as a record
}

type inclusion struct {
	Index int64    `json:"index"`
	Size  int64    `json:"size"`
	Leaf  string   `json:"leaf"`
	Root  string   `json:"root"`
	Proof []string `json:"proof"`
}

type consistency struct {
	First      int64    `json:"first"`
	Second     int64    `json:"second"`
	FirstRoot  string   `json:"first_root"`
	SecondRoot string   `json:"second_root"`
	Proof      []string `json:"proof"`
}

type signRequest struct {
	Skey string `json:"skey"`
	Text string `json:"text"`
}

type result struct {
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

// noteResult is what Go read from a checkpoint note: its text, the names that signed
// it, and the tree the first three lines state.
type noteResult struct {
	result
	Text   string   `json:"text,omitempty"`
	Signed []string `json:"signed,omitempty"`
	Origin string   `json:"origin,omitempty"`
	Size   int64    `json:"size,omitempty"`
	Root   string   `json:"root,omitempty"`
}

type answer struct {
	Notes       []noteResult `json:"notes"`
	LeafHashes  []string     `json:"leaf_hashes"`
	Roots       []string     `json:"roots"` // root of the first n leaves, n = 1..len(leaves)
	Inclusion   []result     `json:"inclusion"`
	Consistency []result     `json:"consistency"`
	Signed      string       `json:"signed,omitempty"`
	Vkeys       []result     `json:"vkeys"`
}

func main() {
	var req request
	if err := json.NewDecoder(os.Stdin).Decode(&req); err != nil {
		fmt.Fprintln(os.Stderr, "interop: bad request:", err)
		os.Exit(2)
	}
	ans := answer{Notes: []noteResult{}, LeafHashes: []string{}, Roots: []string{}, Inclusion: []result{}, Consistency: []result{},
		Vkeys: []result{}}
	for _, msg := range req.Notes {
		ans.Notes = append(ans.Notes, openNote(req.Vkey, msg))
	}
	ans.LeafHashes, ans.Roots = treeHashes(req.Leaves)
	for _, c := range req.Inclusion {
		ans.Inclusion = append(ans.Inclusion, outcome(checkInclusion(c)))
	}
	for _, c := range req.Consistency {
		ans.Consistency = append(ans.Consistency, outcome(checkConsistency(c)))
	}
	for _, vkey := range req.Vkeys {
		_, err := note.NewVerifier(vkey)
		ans.Vkeys = append(ans.Vkeys, outcome(err))
	}
	if req.Sign != nil {
		ans.Signed = sign(*req.Sign)
	}
	if err := json.NewEncoder(os.Stdout).Encode(ans); err != nil {
		os.Exit(2)
	}
}

func outcome(err error) result {
	if err != nil {
		return result{Error: err.Error()}
	}
	return result{OK: true}
}

func openNote(vkey, msg string) noteResult {
	v, err := note.NewVerifier(vkey)
	if err != nil {
		return noteResult{result: outcome(err)}
	}
	n, err := note.Open([]byte(msg), note.VerifierList(v))
	if err != nil {
		return noteResult{result: outcome(err)}
	}
	out := noteResult{result: result{OK: true}, Text: n.Text}
	for _, s := range n.Sigs {
		out.Signed = append(out.Signed, s.Name)
	}
	lines := strings.SplitN(n.Text, "\n", 4)
	if len(lines) < 4 {
		return noteResult{result: outcome(fmt.Errorf("checkpoint has fewer than 3 lines"))}
	}
	size, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil {
		return noteResult{result: outcome(err)}
	}
	root, err := base64.StdEncoding.DecodeString(lines[2])
	if err != nil || len(root) != tlog.HashSize {
		return noteResult{result: outcome(fmt.Errorf("root line is not a base64 SHA-256 hash"))}
	}
	out.Origin, out.Size, out.Root = lines[0], size, hex.EncodeToString(root)
	return out
}

// treeHashes hashes each leaf as a tlog record, stores the tree's hashes as tlog does,
// and reads back the tree hash at every size.
func treeHashes(leaves []leaf) ([]string, []string) {
	var stored []tlog.Hash
	reader := tlog.HashReaderFunc(func(indexes []int64) ([]tlog.Hash, error) {
		out := make([]tlog.Hash, len(indexes))
		for i, x := range indexes {
			out[i] = stored[x]
		}
		return out, nil
	})
	hashes, roots := []string{}, []string{}
	for n, l := range leaves {
		data, err := hex.DecodeString(l.Data)
		if err != nil {
			fail(err)
		}
		h := tlog.RecordHash(data)
		hashes = append(hashes, hex.EncodeToString(h[:]))
		more, err := tlog.StoredHashesForRecordHash(int64(n), h, reader)
		if err != nil {
			fail(err)
		}
		stored = append(stored, more...)
		root, err := tlog.TreeHash(int64(n+1), reader)
		if err != nil {
			fail(err)
		}
		roots = append(roots, hex.EncodeToString(root[:]))
	}
	return hashes, roots
}

func checkInclusion(c inclusion) error {
	proof, err := parseHashes(c.Proof)
	if err != nil {
		return err
	}
	root, err := parseHash(c.Root)
	if err != nil {
		return err
	}
	leafHash, err := parseHash(c.Leaf)
	if err != nil {
		return err
	}
	return tlog.CheckRecord(tlog.RecordProof(proof), c.Size, root, c.Index, leafHash)
}

func checkConsistency(c consistency) error {
	proof, err := parseHashes(c.Proof)
	if err != nil {
		return err
	}
	first, err := parseHash(c.FirstRoot)
	if err != nil {
		return err
	}
	second, err := parseHash(c.SecondRoot)
	if err != nil {
		return err
	}
	return tlog.CheckTree(tlog.TreeProof(proof), c.Second, second, c.First, first)
}

func sign(s signRequest) string {
	signer, err := note.NewSigner(s.Skey)
	if err != nil {
		fail(err)
	}
	msg, err := note.Sign(&note.Note{Text: s.Text}, signer)
	if err != nil {
		fail(err)
	}
	return string(msg)
}

func parseHashes(items []string) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, 0, len(items))
	for _, item := range items {
		h, err := parseHash(item)
		if err != nil {
			return nil, err
		}
		out = append(out, h)
	}
	return out, nil
}

func parseHash(text string) (tlog.Hash, error) {
	var h tlog.Hash
	raw, err := hex.DecodeString(text)
	if err != nil || len(raw) != tlog.HashSize {
		return h, fmt.Errorf("not a hex SHA-256 hash: %q", text)
	}
	copy(h[:], raw)
	return h, nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "interop:", err)
	os.Exit(2)
}
