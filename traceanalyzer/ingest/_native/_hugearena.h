/* Column memory from one anonymous mapping, in 2 MB pages where the kernel gives them.
 *
 * Why: a fresh process faults in every 4 KB page it writes, and on the benchmark's VM two huge
 * pages (transparent huge pages, asked for with madvise) fault in 4 MB several times faster
 * than a thousand small ones (bench/NOTES.md, round 15). A small trace's read writes a few MB of
 * columns once, so the faults were a large part of its time. A fresh mapping also reads as zeros,
 * so nothing has to clear it.
 *
 * An Arena is the mapping; each Span is a piece of it that Python holds as a buffer (a column's
 * values or bitmap), and keeps the Arena alive: the mapping goes when its last Span does. So it
 * suits columns that live and die together, as one trace's frames do; a big trace's columns,
 * dropped one by one as they are copied, are better in their own allocations. */
#ifndef TRACEANALYZER_HUGEARENA_H
#define TRACEANALYZER_HUGEARENA_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <sys/mman.h>

#define ARENA_PAGE ((size_t)2 << 20)
#define ARENA_ALIGN 64 /* each span starts on a cache line (Arrow asks for 8 at least) */

typedef struct {
    PyObject_HEAD
    char *map, *base; /* the mapping, and its first 2 MB boundary */
    size_t map_size, size, used;
} Arena;

typedef struct {
    PyObject_HEAD
    Arena *arena;
    char *p;
    Py_ssize_t len;
} Span;

static void arena_dealloc(Arena *self) {
    if (self->map) munmap(self->map, self->map_size);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject ArenaType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "traceanalyzer.Arena",
    .tp_basicsize = sizeof(Arena),
    .tp_dealloc = (destructor)arena_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A mapping that Spans of column memory share.",
};

static void span_dealloc(Span *self) {
    Py_XDECREF(self->arena);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int span_getbuffer(Span *self, Py_buffer *view, int flags) {
    return PyBuffer_FillInfo(view, (PyObject *)self, self->p, self->len, 1, flags);
}

static PyBufferProcs SPAN_BUFFER = {(getbufferproc)span_getbuffer, NULL};

static PyTypeObject SpanType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "traceanalyzer.Span",
    .tp_basicsize = sizeof(Span),
    .tp_dealloc = (destructor)span_dealloc,
    .tp_as_buffer = &SPAN_BUFFER,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Column memory in an Arena, which it keeps alive.",
};

/* Call once from the module's init. */
static inline int arena_types_ready(void) {
    return PyType_Ready(&ArenaType) || PyType_Ready(&SpanType) ? -1 : 0;
}

static inline size_t arena_round(size_t n) { return (n + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN; }

/* An arena of at least `size` bytes (the sum of arena_round(n) over the spans to come). */
static inline Arena *arena_new(size_t size) {
    Arena *a = PyObject_New(Arena, &ArenaType);
    if (!a) return NULL;
    a->size = size ? size : ARENA_ALIGN;
    a->used = 0;
    a->map_size = a->size + ARENA_PAGE; /* room to start on a 2 MB boundary */
    a->map = mmap(NULL, a->map_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (a->map == MAP_FAILED) {
        a->map = NULL;
        Py_DECREF(a);
        return (Arena *)PyErr_NoMemory();
    }
    a->base = (char *)(((uintptr_t)a->map + ARENA_PAGE - 1) & ~(uintptr_t)(ARENA_PAGE - 1));
#ifdef MADV_HUGEPAGE
    madvise(a->base, a->size, MADV_HUGEPAGE); /* a hint: without it, 4 KB pages */
#endif
    return a;
}

/* A Span of the n bytes at p, which lie in the arena already. */
static inline PyObject *arena_wrap(Arena *a, char *p, size_t n) {
    Span *s = PyObject_New(Span, &SpanType);
    if (!s) return NULL;
    s->arena = (Arena *)Py_NewRef(a);
    s->p = p;
    s->len = (Py_ssize_t)n;
    return (PyObject *)s;
}

/* A zeroed span of n bytes (as a Span object), its memory in *p. */
static inline PyObject *arena_span(Arena *a, size_t n, char **p) {
    if (arena_round(n) > a->size - a->used) {
        PyErr_SetString(PyExc_MemoryError, "an arena's spans outgrew it");
        return NULL;
    }
    Span *s = PyObject_New(Span, &SpanType);
    if (!s) return NULL;
    s->arena = (Arena *)Py_NewRef(a);
    s->p = *p = a->base + a->used;
    s->len = (Py_ssize_t)n;
    a->used += arena_round(n);
    return (PyObject *)s;
}

#endif
