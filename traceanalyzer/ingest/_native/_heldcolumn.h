/* A column's buffers, as Python objects hold them: (values, bitmap) for numbers and booleans,
 * (views, bitmap, data) for text, checked to hold a number of rows before anything reads them.
 * The Arrow export (_arrowstream.h) holds its columns this way while a consumer reads them, and
 * the assembly (_eventassemble.c) the reduced chunks' columns it gathers from. */
#ifndef TRACEANALYZER_HELDCOLUMN_H
#define TRACEANALYZER_HELDCOLUMN_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_stringview.h"

/* Bytes per row; 0 for booleans, a bit per row (see values_size). */
static inline int width_of(char letter) {
    return letter == 't' ? 16 : letter == 'l' ? 8 : letter == 'i' ? 4 : 0;
}

static inline Py_ssize_t values_size(char letter, Py_ssize_t rows) {
    return letter == 'b' ? (rows + 7) / 8 : rows * width_of(letter);
}

/* A column's buffers, as the objects that own them export them (while held, such an object
 * cannot be resized). */
typedef struct {
    Py_buffer bufs[2]; /* values or views, bitmap */
    Py_buffer *data;   /* text: its data buffers (none when data is None) */
    int64_t *data_sizes;
    Py_ssize_t n_data;
} Held;

static inline void let_go(Held *h) {
    for (int k = 0; k < 2; k++)
        if (h->bufs[k].obj) PyBuffer_Release(&h->bufs[k]);
    for (Py_ssize_t k = 0; k < h->n_data; k++)
        if (h->data[k].obj) PyBuffer_Release(&h->data[k]);
    free(h->data);
    free(h->data_sizes);
    h->data = NULL;
    h->data_sizes = NULL;
    h->n_data = 0;
}

/* A text column's data: one buffer object, a tuple of them, or None. */
static inline int hold_data(PyObject *obj, Held *h) {
    if (obj == Py_None) return 0;
    int many = PyTuple_Check(obj);
    Py_ssize_t n = many ? PyTuple_GET_SIZE(obj) : 1;
    h->data = calloc((size_t)n + 1, sizeof *h->data);
    h->data_sizes = calloc((size_t)n + 1, sizeof *h->data_sizes);
    if (!h->data || !h->data_sizes) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        if (PyObject_GetBuffer(many ? PyTuple_GET_ITEM(obj, k) : obj, &h->data[k], PyBUF_SIMPLE))
            return -1;
        h->n_data = k + 1;
        h->data_sizes[k] = h->data[k].len;
    }
    return 0;
}

/* Take the buffers of a column spec and check that they hold ``rows`` rows of ``letter``:
 * they are read as they are, so a wrong size or view must be an exception here, not a
 * read out of bounds. Returns 0, or -1 with an exception set (and nothing held). */
static inline int hold_column(PyObject *col, char letter, Py_ssize_t rows, Held *h) {
    memset(h, 0, sizeof *h);
    Py_ssize_t want = letter == 't' ? 3 : 2;
    if (!PyTuple_Check(col) || PyTuple_GET_SIZE(col) != want) {
        PyErr_SetString(PyExc_ValueError, "a column is (values, bitmap), (views, bitmap, data) "
                                          "or None");
        return -1;
    }
    for (Py_ssize_t k = 0; k < 2; k++) {
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(col, k), &h->bufs[k], PyBUF_SIMPLE)) {
            let_go(h);
            return -1;
        }
    }
    if (letter == 't' && hold_data(PyTuple_GET_ITEM(col, 2), h)) { /* None: all inline */
        let_go(h);
        return -1;
    }
    int ok = rows <= PY_SSIZE_T_MAX / 16 && h->bufs[0].len == values_size(letter, rows) &&
             h->bufs[1].len >= (rows + 7) / 8 &&
             (letter != 't' || views_within_buffers(h->bufs[0].buf, rows, h->data_sizes,
                                                    h->n_data));
    if (ok) return 0;
    let_go(h);
    PyErr_SetString(PyExc_ValueError, "a column's buffers do not hold the given rows");
    return -1;
}

#endif
