/* The sentence sums of psp_core.inference.fast.pooling, compiled: per bag, the weighted sum of its
 * rows of a float32 table (torch's embedding_bag in sum mode with per-sample weights, without
 * torch).
 *
 * weighted_sums(table, ids, offsets, weights, out): bag i is ids[offsets[i]:offsets[i + 1]];
 * out[i] = sum of weights[k] * table[ids[k]] over its k. Buffers (numpy arrays): table float32
 * [rows, dim], ids and offsets int64, weights float32 [len(ids)], out writable float32
 * [len(offsets) - 1, dim], all C-contiguous. Every id and offset is checked before any sum; the
 * sums run without the GIL.
 *
 * The loop reads a block of BLOCK columns of each of the bag's rows into accumulators the
 * compiler keeps in vector registers, and asks for the same block of the row PREFETCH ids ahead
 * meanwhile: a table larger than the caches is read at the memory's speed rather than one row's
 * latency after another (benchmarks/RESULTS.md#light-install). On x86-64 with glibc the loop is
 * compiled for AVX-512, AVX2 and the baseline, and the processor picks at load time.
 *
 * Only the buffer protocol is used (no numpy headers): the extension builds without numpy.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* (defined on the command line by benchmarks/light_install.py's sweep of both) */
#ifndef BLOCK
#define BLOCK 64
#endif
#ifndef PREFETCH
#define PREFETCH 4
#endif

#if defined(__x86_64__) && defined(__GLIBC__) && \
    ((defined(__clang__) && __clang_major__ >= 14) || (!defined(__clang__) && __GNUC__ >= 6))
#define CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CLONES
#endif

CLONES static void sum_bags(const float *restrict table, Py_ssize_t dim,
                            const int64_t *restrict ids, const int64_t *restrict offsets,
                            Py_ssize_t count, const float *restrict weights,
                            float *restrict out) {
    const int64_t last = offsets[count];
    for (Py_ssize_t i = 0; i < count; i++) {
        const int64_t low = offsets[i], high = offsets[i + 1];
        float *restrict sums = out + i * dim;
        for (Py_ssize_t start = 0; start < dim; start += BLOCK) {
            const Py_ssize_t width = dim - start < BLOCK ? dim - start : BLOCK;
            float acc[BLOCK] = {0};
            for (int64_t k = low; k < high; k++) {
                const float *row = table + ids[k] * dim + start;
                const float weight = weights[k];
                if (k + PREFETCH < last) {
                    const float *ahead = table + ids[k + PREFETCH] * dim + start;
                    for (Py_ssize_t c = 0; c < width; c += 16) {
                        __builtin_prefetch(ahead + c, 0, 0);
                    }
                }
                if (width == BLOCK) {
                    for (Py_ssize_t c = 0; c < BLOCK; c++) acc[c] += weight * row[c];
                } else {
                    for (Py_ssize_t c = 0; c < width; c++) acc[c] += weight * row[c];
                }
            }
            memcpy(sums + start, acc, (size_t)width * sizeof(float));
        }
    }
}

/* Whether a buffer holds C-contiguous items of `kind` ('f': float32, 'i': int64) in `ndim`
 * dimensions; sets a TypeError naming `what` where not. */
static int has_items(const Py_buffer *view, char kind, int ndim, const char *what) {
    const char *format = view->format ? view->format : "B";
    if (*format == '<' || *format == '=' || *format == '@') format++;
    int ok = view->ndim == ndim && format[0] != '\0' && format[1] == '\0';
    if (ok && kind == 'f') ok = format[0] == 'f' && view->itemsize == 4;
    if (ok && kind == 'i') {
        ok = (format[0] == 'l' || format[0] == 'q') && view->itemsize == 8;
    }
    if (!ok) {
        PyErr_Format(PyExc_TypeError, "%s: expected a C-contiguous %dD array of %s", what, ndim,
                     kind == 'f' ? "float32" : "int64");
    }
    return ok;
}

/* Checks the shapes, the offsets and the ids against each other; sets an exception where wrong. */
static int check_bags(const Py_buffer *table, const Py_buffer *ids, const Py_buffer *offsets,
                      const Py_buffer *weights, const Py_buffer *out) {
    const Py_ssize_t rows = table->shape[0], dim = table->shape[1];
    const Py_ssize_t count = offsets->shape[0] - 1, length = ids->shape[0];
    const int64_t *bounds = offsets->buf, *id = ids->buf;
    if (count < 0 || weights->shape[0] != length || out->shape[0] != count ||
        out->shape[1] != dim) {
        PyErr_SetString(PyExc_ValueError,
                        "weighted_sums: offsets need one more item than out has rows, weights "
                        "one per id, out the table's width");
        return 0;
    }
    if (bounds[0] < 0 || bounds[count] > length) {
        PyErr_Format(PyExc_ValueError, "weighted_sums: offsets outside the %zd ids", length);
        return 0;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        if (bounds[i + 1] < bounds[i]) {
            PyErr_Format(PyExc_ValueError, "weighted_sums: offsets decrease at %zd", i);
            return 0;
        }
    }
    for (int64_t k = bounds[0]; k < bounds[count]; k++) {
        if (id[k] < 0 || id[k] >= rows) {
            PyErr_Format(PyExc_IndexError, "weighted_sums: id %lld at %lld outside the %zd rows",
                         (long long)id[k], (long long)k, rows);
            return 0;
        }
    }
    return 1;
}

static PyObject *weighted_sums(PyObject *self, PyObject *args) {
    PyObject *objects[5];
    static const char *names[5] = {"table", "ids", "offsets", "weights", "out"};
    static const char kinds[5] = {'f', 'i', 'i', 'f', 'f'};
    static const int dims[5] = {2, 1, 1, 1, 2};
    Py_buffer views[5];
    int held = 0, ok = 1;
    if (!PyArg_ParseTuple(args, "OOOOO:weighted_sums", &objects[0], &objects[1], &objects[2],
                          &objects[3], &objects[4])) {
        return NULL;
    }
    for (; held < 5 && ok; held++) {  /* (held: the buffers acquired, to release) */
        int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (held == 4 ? PyBUF_WRITABLE : 0);
        if (PyObject_GetBuffer(objects[held], &views[held], flags) != 0) break;
        ok = has_items(&views[held], kinds[held], dims[held], names[held]);
    }
    ok = ok && held == 5 && check_bags(&views[0], &views[1], &views[2], &views[3], &views[4]);
    if (ok) {
        Py_BEGIN_ALLOW_THREADS
        sum_bags(views[0].buf, views[0].shape[1], views[1].buf, views[2].buf,
                 views[2].shape[0] - 1, views[3].buf, views[4].buf);
        Py_END_ALLOW_THREADS
    }
    for (int i = 0; i < held; i++) PyBuffer_Release(&views[i]);
    if (!ok) return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"weighted_sums", weighted_sums, METH_VARARGS,
     "weighted_sums(table, ids, offsets, weights, out): per bag ids[offsets[i]:offsets[i+1]], "
     "the sum of its table rows times their weights, written into out."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_sums", "The sentence sums, compiled (see pooling.py).", -1, methods,
};

PyMODINIT_FUNC PyInit__sums(void) { return PyModule_Create(&module); }
