/* Columns whose buffers Python objects own, handed to a consumer (Polars) through the Arrow C
 * stream interface (https://arrow.apache.org/docs/format/CStreamInterface.html): a stream per
 * column, with an array per reduced chunk, so a group of chunks becomes one frame whose columns
 * keep the chunks' buffers, not copies.
 *
 * A stream per column, not one of record batches: Polars keeps an imported struct array whole
 * until its last column is dropped, so a batch's text buffers (the decoder's names) would live
 * as long as any of its number columns, which raised a big read's peak (bench/NOTES.md,
 * round 10).
 *
 * Before, pyarrow stood in between (a pyarrow buffer and array per column, a table, and its
 * export): a small trace paid for that path in a fresh process, and its export allocates
 * through pyarrow's memory pool, whose set-up now and then stalled the first read
 * (bench/NOTES.md, round 10).
 *
 * A column is (values, bitmap) for numbers and booleans (a bitmap of values), (views, bitmap,
 * data) for text (Arrow string views into one data buffer, into a tuple of them by the views'
 * buffer index, or data None when every text is inline), or None: all null, buffers made here. Each exported array holds references to the objects that own its buffers, and
 * drops them (with the GIL) when the consumer releases it. */
#ifndef TRACEANALYZER_ARROWSTREAM_H
#define TRACEANALYZER_ARROWSTREAM_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_columncodes.h"
#include "_heldcolumn.h"
#include "_stringview.h"

/* The ABI of the Arrow C data and stream interfaces, as the specification defines it. */
#define ARROW_FLAG_NULLABLE 2

struct ArrowSchema {
    const char *format;
    const char *name;
    const char *metadata;
    int64_t flags;
    int64_t n_children;
    struct ArrowSchema **children;
    struct ArrowSchema *dictionary;
    void (*release)(struct ArrowSchema *);
    void *private_data;
};

struct ArrowArray {
    int64_t length;
    int64_t null_count;
    int64_t offset;
    int64_t n_buffers;
    int64_t n_children;
    const void **buffers;
    struct ArrowArray **children;
    struct ArrowArray *dictionary;
    void (*release)(struct ArrowArray *);
    void *private_data;
};

struct ArrowArrayStream {
    int (*get_schema)(struct ArrowArrayStream *, struct ArrowSchema *out);
    int (*get_next)(struct ArrowArrayStream *, struct ArrowArray *out);
    const char *(*get_last_error)(struct ArrowArrayStream *);
    void (*release)(struct ArrowArrayStream *);
    void *private_data;
};

/* The batches of one table, checked when made and each column again as exported: the stream's
 * consumer reads their buffers as they are, so a wrong size or view must be an exception, not a
 * read out of bounds. */
typedef struct {
    PyObject_HEAD
    PyObject *formats; /* bytes: a letter per column, 't' text, 'l' int64, 'i' int32, 'b' bool */
    PyObject *names;   /* tuple of str */
    PyObject *batches; /* tuple of (rows, columns), copied from the list given */
    Py_ssize_t column; /* the column a stream is made of (column(i)); -1 for the table */
} Batches;

static PyObject *batches_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    PyObject *formats, *names, *batches;
    static char *kwlist[] = {"formats", "names", "batches", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!O!O!", kwlist, &PyBytes_Type, &formats,
                                     &PyTuple_Type, &names, &PyList_Type, &batches))
        return NULL;
    Py_ssize_t ncols = PyBytes_GET_SIZE(formats);
    const char *letters = PyBytes_AS_STRING(formats);
    if (PyTuple_GET_SIZE(names) != ncols) {
        PyErr_SetString(PyExc_ValueError, "a name for each format letter");
        return NULL;
    }
    for (Py_ssize_t c = 0; c < ncols; c++) {
        if (!strchr(LAYOUT_LETTERS, letters[c]) || !letters[c] ||
            !PyUnicode_Check(PyTuple_GET_ITEM(names, c))) {
            PyErr_SetString(PyExc_ValueError, "formats are 't', 'l', 'i' or 'b'; names are str");
            return NULL;
        }
    }
    for (Py_ssize_t b = 0; b < PyList_GET_SIZE(batches); b++) {
        PyObject *batch = PyList_GET_ITEM(batches, b), *cols;
        Py_ssize_t rows;
        if (!PyTuple_Check(batch)) {
            PyErr_SetString(PyExc_ValueError, "a batch is (rows, columns)");
            return NULL;
        }
        if (!PyArg_ParseTuple(batch, "nO!", &rows, &PyTuple_Type, &cols)) return NULL;
        if (rows < 0 || PyTuple_GET_SIZE(cols) != ncols) {
            PyErr_SetString(PyExc_ValueError, "a batch has a column for each format letter");
            return NULL;
        }
        for (Py_ssize_t c = 0; c < ncols; c++) {
            PyObject *col = PyTuple_GET_ITEM(cols, c);
            Held held;
            if (col == Py_None) continue;
            if (hold_column(col, letters[c], rows, &held)) return NULL;
            let_go(&held);
        }
    }
    Batches *self = (Batches *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    self->formats = Py_NewRef(formats);
    self->names = Py_NewRef(names);
    self->batches = PySequence_Tuple(batches); /* the list could change after the checks */
    self->column = -1;
    if (!self->batches) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static void batches_dealloc(Batches *self) {
    Py_XDECREF(self->formats);
    Py_XDECREF(self->names);
    Py_XDECREF(self->batches);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The consumer releases on any thread, with or without the GIL. At interpreter exit the buffers
 * are left (the process is ending). */
static int gil_available(void) {
    return Py_IsInitialized();
}

/* ---- the schema: one nullable column ---- */

static void release_schema(struct ArrowSchema *s) {
    free(s->private_data); /* the name */
    s->release = NULL;
}

static int make_schema(Batches *b, struct ArrowSchema *out) {
    char letter = PyBytes_AS_STRING(b->formats)[b->column];
    Py_ssize_t n;
    const char *name = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(b->names, b->column), &n);
    char *copy = name ? malloc((size_t)n + 1) : NULL;
    if (!copy) {
        PyErr_Clear();
        return ENOMEM;
    }
    memcpy(copy, name, (size_t)n + 1);
    *out = (struct ArrowSchema){.format = letter == LAYOUT_TEXT    ? "vu"
                                          : letter == LAYOUT_INT64 ? "l"
                                          : letter == LAYOUT_INT32 ? "i"
                                                                   : "b",
                                .name = copy, .flags = ARROW_FLAG_NULLABLE,
                                .release = release_schema, .private_data = copy};
    return 0;
}

/* ---- the column of one batch ---- */

typedef struct {
    Held held;   /* the buffers of the column's objects */
    void *nulls; /* an all-null column's buffers, made here */
    const void **buffers;
    int64_t no_data; /* the variadic buffer sizes of an all-null text column: none */
} ExportedColumn;

static void release_column(struct ArrowArray *a) {
    ExportedColumn *col = a->private_data;
    if (gil_available()) {
        PyGILState_STATE gil = PyGILState_Ensure();
        let_go(&col->held);
        PyGILState_Release(gil);
    }
    free(col->nulls);
    free(col->buffers);
    free(col);
    a->release = NULL;
}

static int64_t nulls_in(const uint8_t *bitmap, int64_t rows) {
    int64_t set = 0, full = rows / 8;
    for (int64_t i = 0; i < full; i++) set += __builtin_popcount(bitmap[i]);
    if (rows % 8) set += __builtin_popcount(bitmap[full] & ((1u << (rows % 8)) - 1));
    return rows - set;
}

static int make_column(PyObject *spec, char letter, int64_t rows, struct ArrowArray *out) {
    ExportedColumn *col = calloc(1, sizeof *col);
    if (!col) return ENOMEM;
    *out = (struct ArrowArray){.length = rows, .n_buffers = 2, .release = release_column,
                               .private_data = col};
    if (spec == Py_None) { /* all null: a zero bitmap and zero values */
        size_t bitmap = ((size_t)rows + 63) / 64 * 8; /* whole words: the values stay aligned */
        col->nulls = calloc(1, bitmap + (size_t)values_size(letter, rows) + 1);
        col->buffers = calloc(4, sizeof *col->buffers);
        if (!col->nulls || !col->buffers) {
            free(col->nulls);
            free(col->buffers);
            free(col);
            out->release = NULL;
            return ENOMEM;
        }
        col->buffers[0] = col->nulls;
        col->buffers[1] = (char *)col->nulls + bitmap;
        out->null_count = rows;
    } else {
        /* Checked again as exported, with the buffers held from now on. */
        if (hold_column(spec, letter, rows, &col->held) ||
            !(col->buffers = calloc((size_t)col->held.n_data + 4, sizeof *col->buffers))) {
            let_go(&col->held);
            PyErr_Clear();
            free(col);
            out->release = NULL;
            return EINVAL;
        }
        col->buffers[1] = col->held.bufs[0].buf;
        col->buffers[0] = col->held.bufs[1].buf;
        out->null_count = nulls_in(col->buffers[0], rows);
    }
    if (letter == 't') { /* validity, views, the data buffers, then their sizes */
        Py_ssize_t n = col->held.n_data;
        for (Py_ssize_t k = 0; k < n; k++) col->buffers[2 + k] = col->held.data[k].buf;
        col->buffers[2 + n] = n ? (const void *)col->held.data_sizes : &col->no_data;
        out->n_buffers = 3 + n;
    }
    out->buffers = col->buffers;
    return 0;
}

/* ---- the stream ---- */

typedef struct {
    Batches *batches;
    Py_ssize_t next;
} StreamState;

static int stream_schema(struct ArrowArrayStream *s, struct ArrowSchema *out) {
    StreamState *state = s->private_data;
    PyGILState_STATE gil = PyGILState_Ensure();
    int rc = make_schema(state->batches, out);
    PyGILState_Release(gil);
    return rc;
}

static int stream_next(struct ArrowArrayStream *s, struct ArrowArray *out) {
    StreamState *state = s->private_data;
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject *all = state->batches->batches;
    int rc = 0;
    if (state->next >= PyTuple_GET_SIZE(all)) {
        out->release = NULL; /* the end of the stream */
    } else {
        PyObject *batch = PyTuple_GET_ITEM(all, state->next++);
        Py_ssize_t c = state->batches->column;
        rc = make_column(PyTuple_GET_ITEM(PyTuple_GET_ITEM(batch, 1), c),
                         PyBytes_AS_STRING(state->batches->formats)[c],
                         PyLong_AsLongLong(PyTuple_GET_ITEM(batch, 0)), out);
    }
    PyGILState_Release(gil);
    return rc;
}

static const char *stream_error(struct ArrowArrayStream *s) {
    (void)s;
    return "out of memory, or a column's buffers no longer hold its rows";
}

static void stream_release(struct ArrowArrayStream *s) {
    StreamState *state = s->private_data;
    if (gil_available()) {
        PyGILState_STATE gil = PyGILState_Ensure();
        Py_DECREF(state->batches);
        PyGILState_Release(gil);
    }
    free(state);
    s->release = NULL;
}

static void capsule_free(PyObject *capsule) {
    struct ArrowArrayStream *s = PyCapsule_GetPointer(capsule, "arrow_array_stream");
    if (!s) {
        PyErr_Clear();
        return;
    }
    if (s->release) s->release(s); /* not taken by a consumer */
    free(s);
}

static PyObject *batches_arrow_c_stream(Batches *self, PyObject *args, PyObject *kwargs) {
    PyObject *requested = Py_None; /* a schema the consumer would like: this one is fixed */
    static char *kwlist[] = {"requested_schema", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O", kwlist, &requested)) return NULL;
    if (self->column < 0) {
        PyErr_SetString(PyExc_ValueError, "a stream is of one column: use column(i)");
        return NULL;
    }
    struct ArrowArrayStream *s = calloc(1, sizeof *s);
    StreamState *state = calloc(1, sizeof *state);
    if (!s || !state) {
        free(s);
        free(state);
        return PyErr_NoMemory();
    }
    state->batches = (Batches *)Py_NewRef(self);
    *s = (struct ArrowArrayStream){stream_schema, stream_next, stream_error, stream_release,
                                   state};
    PyObject *capsule = PyCapsule_New(s, "arrow_array_stream", capsule_free);
    if (!capsule) {
        stream_release(s);
        free(s);
    }
    return capsule;
}

/* The same batches, as the stream of their column i. */
static PyObject *batches_column(Batches *self, PyObject *arg) {
    Py_ssize_t i = PyLong_AsSsize_t(arg);
    if (i == -1 && PyErr_Occurred()) return NULL;
    if (i < 0 || i >= PyBytes_GET_SIZE(self->formats)) {
        PyErr_SetString(PyExc_IndexError, "no such column");
        return NULL;
    }
    Batches *column = (Batches *)Py_TYPE(self)->tp_alloc(Py_TYPE(self), 0);
    if (!column) return NULL;
    column->formats = Py_NewRef(self->formats);
    column->names = Py_NewRef(self->names);
    column->batches = Py_NewRef(self->batches);
    column->column = i;
    return (PyObject *)column;
}

static PyMethodDef BATCHES_METHODS[] = {
    {"column", (PyCFunction)batches_column, METH_O, "column(i): the batches of column i, whose "
     "__arrow_c_stream__ gives an array per batch."},
    {"__arrow_c_stream__", (PyCFunction)(void (*)(void))batches_arrow_c_stream,
     METH_VARARGS | METH_KEYWORDS, "A column's batches as an Arrow C stream (a PyCapsule)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject BatchesType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_eventreduce.Batches",
    .tp_basicsize = sizeof(Batches),
    .tp_dealloc = (destructor)batches_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Batches(formats, names, batches): a table's columns, a batch per chunk; "
              "column(i) is column i for the Arrow C stream interface.",
    .tp_methods = BATCHES_METHODS,
    .tp_new = batches_new,
};

#endif
