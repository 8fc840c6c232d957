/* Many SHA-256 digests in one call: ledger/digests.py's C half.
 *
 * Why: hashlib costs about 0.4 us a call on this OpenSSL 3 build (the EVP context made and
 * freed each time) where SHA-256 of a 250-byte entry takes well under 0.1 us with the
 * CPU's SHA instructions. Verify and ingest make three digests an entry (leaf, chain link,
 * tree node), so the call, not the hashing, was most of their hashing time. Here a call
 * hashes a whole batch with OpenSSL's low-level SHA256_* functions (the same digests, the
 * same SHA-NI code underneath), with the GIL released.
 *
 * Every function returns the digests end to end (32 bytes each) as one bytes object.
 * ledger/digests.py holds the same functions in plain hashlib, used when this module
 * was not built, and the tests compare the two on random inputs.
 */
#define PY_SSIZE_T_CLEAN
#define OPENSSL_SUPPRESS_DEPRECATED /* SHA256_Init & co.: deprecated in 3.0, kept until 4.0 */
#include <Python.h>
#include <openssl/sha.h>
#include <string.h>

#define DIGEST 32

static int contiguous(PyObject *obj, Py_buffer *view) { return PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS); }

static PyObject *digests_buffer(Py_ssize_t count, unsigned char **out) {
    PyObject *result = PyBytes_FromStringAndSize(NULL, count * DIGEST);
    if (result != NULL) {
        *out = (unsigned char *)PyBytes_AS_STRING(result);
    }
    return result;
}

/* The offsets as a private copy: int64 (numpy's int64), `expected` + 1 of them (any number
 * from one up when expected < 0), non-decreasing and within [0, size]. They are checked in
 * the copy and read only from it, so another thread writing to the caller's array while
 * the GIL is released cannot move a span past what was checked. NULL and an exception
 * when they are not so; else the copy (PyMem_Free it) and their count - 1 in *spans. */
static int64_t *checked_offsets(PyObject *obj, Py_ssize_t expected, Py_ssize_t size, Py_ssize_t *spans) {
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        return NULL;
    }
    int64_t *copy = NULL;
    const char *format = view.format != NULL ? view.format : "B";
    if (*format == '@' || *format == '=' || *format == '<') {
        format++;
    }
    Py_ssize_t count = view.len / 8;
    if (view.itemsize != 8 || (strcmp(format, "q") != 0 && strcmp(format, "l") != 0)) {
        PyErr_SetString(PyExc_ValueError, "offsets: an array of int64 expected");
    } else if (count < 1 || (expected >= 0 && count != expected + 1)) {
        PyErr_SetString(PyExc_ValueError, "offsets: one int64 a span and one more");
    } else if ((copy = PyMem_Malloc((size_t)view.len)) == NULL) {
        PyErr_NoMemory();
    } else {
        memcpy(copy, view.buf, (size_t)view.len);
        for (Py_ssize_t i = 0; i < count; i++) {
            if (copy[i] < 0 || copy[i] > size || (i > 0 && copy[i - 1] > copy[i])) {
                PyErr_Format(PyExc_ValueError, "offsets: offset %zd out of order or past the data", i);
                PyMem_Free(copy);
                copy = NULL;
                break;
            }
        }
        *spans = count - 1;
    }
    PyBuffer_Release(&view);
    return copy;
}

/* each(data, offsets): SHA-256 of data[offsets[i]:offsets[i+1]] for each i, where offsets
 * is a buffer of native int64 (numpy's int64), non-decreasing and within data. */
static PyObject *each(PyObject *self, PyObject *args) {
    PyObject *data_obj, *offsets_obj;
    if (!PyArg_ParseTuple(args, "OO:each", &data_obj, &offsets_obj)) {
        return NULL;
    }
    Py_buffer data;
    if (contiguous(data_obj, &data) < 0) {
        return NULL;
    }
    PyObject *result = NULL;
    Py_ssize_t count = 0;
    int64_t *at = checked_offsets(offsets_obj, -1, data.len, &count);
    if (at == NULL) {
        goto done;
    }
    unsigned char *out;
    result = digests_buffer(count, &out);
    if (result == NULL) {
        goto done;
    }
    const unsigned char *bytes = (const unsigned char *)data.buf;
    Py_BEGIN_ALLOW_THREADS
    SHA256_CTX context;
    for (Py_ssize_t i = 0; i < count; i++) {
        SHA256_Init(&context);
        SHA256_Update(&context, bytes + at[i], (size_t)(at[i + 1] - at[i]));
        SHA256_Final(out + i * DIGEST, &context);
    }
    Py_END_ALLOW_THREADS
done:
    PyMem_Free(at);
    PyBuffer_Release(&data);
    return result;
}

/* The digest of prefix || left || right into out, with left and right 32 bytes each. */
static inline void joined(const unsigned char *prefix, Py_ssize_t prefix_len, const unsigned char *left,
                          const unsigned char *right, unsigned char *out) {
    unsigned char message[64 + 2 * DIGEST];
    memcpy(message, prefix, (size_t)prefix_len);
    memcpy(message + prefix_len, left, DIGEST);
    memcpy(message + prefix_len + DIGEST, right, DIGEST);
    SHA256_CTX context;
    SHA256_Init(&context);
    SHA256_Update(&context, message, (size_t)(prefix_len + 2 * DIGEST));
    SHA256_Final(out, &context);
}

/* SHA-256 of prefix || left || right for `count` pairs: left i at lefts + i * step, right i
 * at rights + i * step (pairs: two packed columns, step 32; level: one column of
 * neighbours, step 64). The buffers stay held by the caller. */
static PyObject *pair_digests(const unsigned char *prefix, Py_ssize_t prefix_len, const unsigned char *lefts,
                              const unsigned char *rights, Py_ssize_t step, Py_ssize_t count) {
    unsigned char *out;
    PyObject *result = digests_buffer(count, &out);
    if (result == NULL) {
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < count; i++) {
        joined(prefix, prefix_len, lefts + i * step, rights + i * step, out + i * DIGEST);
    }
    Py_END_ALLOW_THREADS
    return result;
}

static int prefix_fits(Py_ssize_t prefix_len) {
    if (prefix_len > 64) {
        PyErr_SetString(PyExc_ValueError, "prefix: at most 64 bytes");
        return 0;
    }
    return 1;
}

/* pairs(prefix, lefts, rights): SHA-256 of prefix || lefts[i] || rights[i], both packed
 * 32-byte hashes of one count (the prefix at most 64 bytes). */
static PyObject *pairs(PyObject *self, PyObject *args) {
    const unsigned char *prefix;
    Py_ssize_t prefix_len;
    PyObject *lefts_obj, *rights_obj;
    if (!PyArg_ParseTuple(args, "y#OO:pairs", &prefix, &prefix_len, &lefts_obj, &rights_obj) || !prefix_fits(prefix_len)) {
        return NULL;
    }
    Py_buffer lefts, rights;
    if (contiguous(lefts_obj, &lefts) < 0) {
        return NULL;
    }
    if (contiguous(rights_obj, &rights) < 0) {
        PyBuffer_Release(&lefts);
        return NULL;
    }
    PyObject *result = NULL;
    if (lefts.len % DIGEST != 0 || lefts.len != rights.len) {
        PyErr_SetString(PyExc_ValueError, "lefts and rights: packed 32-byte hashes, as many of each");
    } else {
        result = pair_digests(prefix, prefix_len, lefts.buf, rights.buf, DIGEST, lefts.len / DIGEST);
    }
    PyBuffer_Release(&lefts);
    PyBuffer_Release(&rights);
    return result;
}

/* level(prefix, nodes): a tree level's parents, SHA-256 of prefix || nodes[2i] || nodes[2i+1]
 * for the packed 32-byte nodes (an even count). */
static PyObject *level(PyObject *self, PyObject *args) {
    const unsigned char *prefix;
    Py_ssize_t prefix_len;
    PyObject *nodes_obj;
    if (!PyArg_ParseTuple(args, "y#O:level", &prefix, &prefix_len, &nodes_obj) || !prefix_fits(prefix_len)) {
        return NULL;
    }
    Py_buffer nodes;
    if (contiguous(nodes_obj, &nodes) < 0) {
        return NULL;
    }
    PyObject *result = NULL;
    if (nodes.len % (2 * DIGEST) != 0) {
        PyErr_SetString(PyExc_ValueError, "nodes: an even count of packed 32-byte hashes");
    } else {
        const unsigned char *node = (const unsigned char *)nodes.buf;
        result = pair_digests(prefix, prefix_len, node, node + DIGEST, 2 * DIGEST, nodes.len / (2 * DIGEST));
    }
    PyBuffer_Release(&nodes);
    return result;
}

/* chain(prefix, start, leaves): the links of a hash chain, link[i] = SHA-256 of
 * prefix || link[i-1] || leaves[i], with link[-1] = start (32 bytes). */
static PyObject *chain(PyObject *self, PyObject *args) {
    const unsigned char *prefix, *start;
    Py_ssize_t prefix_len, start_len;
    PyObject *leaves_obj;
    if (!PyArg_ParseTuple(args, "y#y#O:chain", &prefix, &prefix_len, &start, &start_len, &leaves_obj) || !prefix_fits(prefix_len)) {
        return NULL;
    }
    if (start_len != DIGEST) {
        PyErr_SetString(PyExc_ValueError, "start: 32 bytes");
        return NULL;
    }
    Py_buffer leaves;
    if (contiguous(leaves_obj, &leaves) < 0) {
        return NULL;
    }
    PyObject *result = NULL;
    if (leaves.len % DIGEST != 0) {
        PyErr_SetString(PyExc_ValueError, "leaves: packed 32-byte hashes");
        goto done;
    }
    Py_ssize_t count = leaves.len / DIGEST;
    unsigned char *out;
    result = digests_buffer(count, &out);
    if (result == NULL) {
        goto done;
    }
    const unsigned char *leaf = (const unsigned char *)leaves.buf;
    Py_BEGIN_ALLOW_THREADS
    const unsigned char *previous = start;
    for (Py_ssize_t i = 0; i < count; i++) {
        joined(prefix, prefix_len, previous, leaf + i * DIGEST, out + i * DIGEST);
        previous = out + i * DIGEST;
    }
    Py_END_ALLOW_THREADS
done:
    PyBuffer_Release(&leaves);
    return result;
}

/* One part of each row's message: the same bytes for every row, or row i's span
 * data[offsets[i]:offsets[i+1]] of a column. */
typedef struct {
    Py_buffer data;
    int64_t *at; /* a column's offsets, a checked private copy; NULL for a constant */
    int held;
} Part;

static void release_parts(Part *parts, Py_ssize_t count) {
    for (Py_ssize_t p = 0; p < count; p++) {
        if (parts[p].held) PyBuffer_Release(&parts[p].data);
        PyMem_Free(parts[p].at);
    }
    PyMem_Free(parts);
}

/* A part, checked: a constant (bytes), or a (data, int64 offsets) pair with rows + 1
 * offsets, in order and within the data. */
static int take_part(PyObject *item, Py_ssize_t rows, Part *part) {
    if (PyBytes_Check(item)) {
        if (PyObject_GetBuffer(item, &part->data, PyBUF_SIMPLE) < 0) return -1;
        part->held = 1;
        return 0;
    }
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2) {
        PyErr_SetString(PyExc_TypeError, "a part is bytes or a (data, offsets) pair");
        return -1;
    }
    if (contiguous(PyTuple_GET_ITEM(item, 0), &part->data) < 0) return -1;
    part->held = 1;
    Py_ssize_t spans = 0;
    part->at = checked_offsets(PyTuple_GET_ITEM(item, 1), rows, part->data.len, &spans);
    return part->at == NULL ? -1 : 0;
}

/* The bytes of part p in row i. */
static inline Py_ssize_t part_size(const Part *part, Py_ssize_t i) {
    return part->at != NULL ? (Py_ssize_t)(part->at[i + 1] - part->at[i]) : part->data.len;
}

/* joined(parts, rows): SHA-256 of each row's parts end to end, without making the
 * messages first: each row is put together in one buffer and hashed. */
static PyObject *joined_each(PyObject *self, PyObject *args) {
    PyObject *sequence;
    Py_ssize_t rows;
    if (!PyArg_ParseTuple(args, "On:joined", &sequence, &rows)) return NULL;
    PyObject *items = PySequence_Fast(sequence, "parts: a sequence");
    if (items == NULL) return NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(items);
    Part *parts = PyMem_Calloc((size_t)(count ? count : 1), sizeof(Part));
    PyObject *result = NULL;
    unsigned char *message = NULL;
    if (parts == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (rows < 0 || rows > PY_SSIZE_T_MAX / (DIGEST * 2)) {
        PyErr_SetString(PyExc_ValueError, "rows: not negative, and few enough that their digests fit in memory");
        goto done;
    }
    for (Py_ssize_t p = 0; p < count; p++) {
        if (take_part(PySequence_Fast_GET_ITEM(items, p), rows, &parts[p]) < 0) goto done;
    }
    Py_ssize_t longest = 0;
    for (Py_ssize_t i = 0; i < rows; i++) {
        Py_ssize_t length = 0;
        for (Py_ssize_t p = 0; p < count; p++) {
            Py_ssize_t size = part_size(&parts[p], i);
            if (size > PY_SSIZE_T_MAX - length) {
                PyErr_Format(PyExc_ValueError, "row %zd: longer than memory can hold", i);
                goto done;
            }
            length += size;
        }
        if (length > longest) longest = length;
    }
    message = PyMem_Malloc((size_t)(longest ? longest : 1));
    if (message == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    unsigned char *out;
    result = digests_buffer(rows, &out);
    if (result == NULL) goto done;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < rows; i++) {
        Py_ssize_t length = 0;
        for (Py_ssize_t p = 0; p < count; p++) {
            const unsigned char *from = (const unsigned char *)parts[p].data.buf + (parts[p].at != NULL ? parts[p].at[i] : 0);
            Py_ssize_t size = part_size(&parts[p], i);
            memcpy(message + length, from, (size_t)size);
            length += size;
        }
        SHA256_CTX context;
        SHA256_Init(&context);
        SHA256_Update(&context, message, (size_t)length);
        SHA256_Final(out + i * DIGEST, &context);
    }
    Py_END_ALLOW_THREADS
done:
    PyMem_Free(message);
    if (parts != NULL) release_parts(parts, count);
    Py_DECREF(items);
    return result;
}

static PyMethodDef methods[] = {
    {"each", each, METH_VARARGS, "each(data, offsets) -> the SHA-256 of each span, end to end"},
    {"pairs", pairs, METH_VARARGS, "pairs(prefix, lefts, rights) -> SHA-256(prefix||l||r) for each pair"},
    {"level", level, METH_VARARGS, "level(prefix, nodes) -> SHA-256(prefix||a||b) for each consecutive pair"},
    {"joined", joined_each, METH_VARARGS, "joined(parts, rows) -> SHA-256 of each row's parts end to end"},
    {"chain", chain, METH_VARARGS, "chain(prefix, start, leaves) -> each link of the chain from start"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_digests", NULL, -1, methods};

PyMODINIT_FUNC PyInit__digests(void) { return PyModule_Create(&module); }
