/* Assemble the canonical frames of a trace whose chunks were reduced as one group.
 *
 * The reference is the Polars assembly of kineto/assemble.py: the stable sorts by start time,
 * each runtime call's parent operator, the launch calls' CUDA-graph flag, the GPU activities'
 * categories and copy directions per distinct name, and the duplicate check. On a small trace
 * their work is small, but a fresh process pays each kind of Polars query the first time it
 * runs one, which made a small trace's assembly as long as its decoding (bench/NOTES.md,
 * round 15). Here it is one pass of C over the reduced chunks'
 * buffers, giving the final columns, which Polars takes over as they are.
 *
 * It promises the reference's frames or nothing: it returns None where it is not sure (a GPU
 * activity's name that is not ASCII, whose Unicode lowercasing is Polars' business; a category
 * pattern outside _regexlite.h's syntax; GPU rows that may be duplicates, which the reference
 * drops), and kineto then assembles with Polars.
 *
 * assemble(cpu, gpu, annotations, syncs, rank, patterns, copy_kinds, memory_kinds)
 *   -> None | (gpu_without_launch, (cpu, gpu, annotations, syncs))
 *   cpu..syncs: (layout, batches), each batch (rows, columns) as _eventreduce.reduce made it;
 *   patterns: ((category, regex), ...), kernel categories in order (categories.KERNEL_PATTERNS);
 *   copy_kinds, memory_kinds: the Enum values a copy direction and memory kind may take.
 *   Each table comes back as (rows, layout, columns) in the canonical frame's column order,
 *   for _eventreduce.Batches. Gathered text keeps its chunks' data buffers: a view's buffer
 *   index is its chunk's.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h> /* first: it defines _GNU_SOURCE, for memmem */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_ascii.h"
#include "_heldcolumn.h"
#include "_hugearena.h"
#include "_regexlite.h"
#include "_stringview.h"

/* The reduced tables' layouts (_eventreduce.c's LAYOUT) and the canonical frames' (model.py's
 * schemas: i Int32, l Int64, t text or Enum, b Boolean). */
enum { T_CPU, T_GPU, T_ANNOTATIONS, T_SYNCS, N_TABLES };
static const char *const IN_LAYOUT[N_TABLES] = {"tllltlllttttl", "ilttlllliiiiiiill", "llttlll",
                                                "lliltlll"};
static const char *const OUT_LAYOUT[N_TABLES] = {"illttlllltttttl", "iiltttlllliiiiiiilltttb",
                                                 "illttlllt", "illiltlll"};
/* The reduced tables' columns, by name. */
enum { C_NAME, C_START, C_END, C_CORRELATION, C_KIND, C_PID, C_TID, C_EXTERNAL, C_DIMS, C_TYPES,
       C_STACK, C_CONCRETE, C_FLOPS };
enum { G_DEVICE, G_STREAM, G_KIND, G_NAME, G_START, G_END, G_CORRELATION, G_EXTERNAL, G_GRID,
       G_BLOCK = G_GRID + 3, G_REGISTERS = G_BLOCK + 3, G_SHARED, G_BYTES };
enum { A_PID, A_TID, A_KIND, A_NAME, A_START, A_END, A_STEP };
enum { S_PID, S_TID, S_DEVICE, S_STREAM, S_TYPE, S_START, S_END, S_CORRELATION };

/* ---- the input: a table's columns, a piece per chunk ---- */

typedef struct {
    const char *values;    /* views, int64 or int32 */
    const uint8_t *bitmap;
    const char *data;      /* text: its data buffer, if any */
    PyObject *data_obj;    /* borrowed: the batch holds it */
} Piece;

typedef struct {
    int ncols;
    Py_ssize_t nbatches, rows;
    Piece *pieces;               /* nbatches x ncols */
    Held *held;                  /* ... and the buffers they point into */
    int32_t *batch_of, *row_of;  /* each row's chunk, and its row there */
    const char *layout;
} Table;

static inline const Piece *piece(const Table *t, int col, Py_ssize_t g) {
    return &t->pieces[(Py_ssize_t)t->batch_of[g] * t->ncols + col];
}

static inline int bit(const uint8_t *bitmap, Py_ssize_t i) { return (bitmap[i >> 3] >> (i & 7)) & 1; }

static inline int valid(const Table *t, int col, Py_ssize_t g) {
    return bit(piece(t, col, g)->bitmap, t->row_of[g]);
}

static inline int64_t number_in(const Piece *p, char letter, Py_ssize_t i) {
    if (letter == 'i') {
        int32_t v;
        memcpy(&v, p->values + 4 * i, 4);
        return v;
    }
    int64_t v;
    memcpy(&v, p->values + 8 * i, 8);
    return v;
}

static inline int64_t number(const Table *t, int col, Py_ssize_t g) {
    return number_in(piece(t, col, g), t->layout[col], t->row_of[g]);
}

static inline const unsigned char *view(const Table *t, int col, Py_ssize_t g) {
    return (const unsigned char *)piece(t, col, g)->values + 16 * (Py_ssize_t)t->row_of[g];
}

typedef struct {
    const char *p;
    int32_t n;
} Text;

/* Row g's text (valid rows only). */
static inline Text text(const Table *t, int col, Py_ssize_t g) {
    Text s;
    s.p = view_text(view(t, col, g), piece(t, col, g)->data, &s.n);
    return s;
}

/* Whether s is the literal lit (a string constant). */
#define TEXT_IS(s, lit) ((s).n == (int32_t)sizeof(lit) - 1 && memcmp((s).p, lit, sizeof(lit) - 1) == 0)

static void drop_table(Table *t) {
    for (Py_ssize_t k = 0; t->held && k < t->nbatches * t->ncols; k++) let_go(&t->held[k]);
    PyMem_RawFree(t->held);
    PyMem_RawFree(t->pieces);
    PyMem_RawFree(t->batch_of);
    PyMem_RawFree(t->row_of);
    memset(t, 0, sizeof *t);
}

/* Take a table's batches, checking every buffer: a wrong size or view is a caller's bug, and
 * must be an exception, not a read out of bounds. */
static int load_table(PyObject *spec, int which, Table *t) {
    PyObject *batches;
    const char *layout;
    memset(t, 0, sizeof *t);
    if (!PyArg_ParseTuple(spec, "sO!", &layout, &PyList_Type, &batches)) return -1;
    if (strcmp(layout, IN_LAYOUT[which]) != 0) {
        PyErr_SetString(PyExc_ValueError, "a table's layout is not the reduction's");
        return -1;
    }
    t->layout = IN_LAYOUT[which];
    t->ncols = (int)strlen(layout);
    t->nbatches = PyList_GET_SIZE(batches);
    if (t->nbatches > INT32_MAX) goto bad;
    t->pieces = PyMem_RawCalloc((size_t)(t->nbatches * t->ncols) + 1, sizeof *t->pieces);
    t->held = PyMem_RawCalloc((size_t)(t->nbatches * t->ncols) + 1, sizeof *t->held);
    if (!t->pieces || !t->held) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t b = 0; b < t->nbatches; b++) {
        PyObject *batch = PyList_GET_ITEM(batches, b), *cols;
        Py_ssize_t rows;
        if (!PyTuple_Check(batch) || !PyArg_ParseTuple(batch, "nO!", &rows, &PyTuple_Type, &cols))
            goto bad;
        if (rows < 0 || rows > INT32_MAX || PyTuple_GET_SIZE(cols) != t->ncols) goto bad;
        for (int c = 0; c < t->ncols; c++) {
            PyObject *col = PyTuple_GET_ITEM(cols, c);
            Piece *p = &t->pieces[b * t->ncols + c];
            Held *h = &t->held[b * t->ncols + c];
            if (hold_column(col, layout[c], rows, h)) return -1;
            /* One data buffer at most, the reduction's: a gathered view names its chunk's. */
            if (h->n_data > 1) goto bad;
            p->values = h->bufs[0].buf;
            p->bitmap = h->bufs[1].buf;
            p->data = h->n_data ? h->data[0].buf : NULL;
            p->data_obj = layout[c] == 't' ? PyTuple_GET_ITEM(col, 2) : NULL;
        }
        t->rows += rows;
    }
    if (t->rows > INT32_MAX) goto bad;
    t->batch_of = PyMem_RawMalloc((size_t)t->rows * 4 + 4);
    t->row_of = PyMem_RawMalloc((size_t)t->rows * 4 + 4);
    if (!t->batch_of || !t->row_of) {
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t g = 0;
    for (Py_ssize_t b = 0; b < t->nbatches; b++) {
        Py_ssize_t rows = PyLong_AsSsize_t(PyTuple_GET_ITEM(PyList_GET_ITEM(batches, b), 0));
        for (Py_ssize_t i = 0; i < rows; i++, g++) {
            t->batch_of[g] = (int32_t)b;
            t->row_of[g] = (int32_t)i;
        }
    }
    return 0;
bad:
    if (!PyErr_Occurred())
        PyErr_SetString(PyExc_ValueError, "a batch's columns do not hold its rows");
    return -1;
}

/* ---- the output: columns as _eventreduce.Batches takes them ---- */

typedef struct {
    char *values;
    uint8_t *bitmap;
    char letter;
} Out;

static inline void mark(Out *o, Py_ssize_t r) { o->bitmap[r >> 3] |= (uint8_t)(1u << (r & 7)); }

static inline void put_int(Out *o, Py_ssize_t r, int64_t v) {
    if (o->letter == 'i') {
        int32_t narrow = (int32_t)v; /* the same type in and out: it fits */
        memcpy(o->values + 4 * r, &narrow, 4);
    } else {
        memcpy(o->values + 8 * r, &v, 8);
    }
    mark(o, r);
}

static inline void put_view(Out *o, Py_ssize_t r, const unsigned char *v, int32_t buffer) {
    memcpy(o->values + 16 * r, v, 16);
    int32_t n;
    memcpy(&n, v, 4);
    if (n > VIEW_INLINE) memcpy(o->values + 16 * r + 8, &buffer, 4);
    mark(o, r);
}

/* A short literal (a kind; an Enum value), inline in its view. */
static inline void put_literal(Out *o, Py_ssize_t r, const char *p, int32_t n) {
    unsigned char v[16];
    view_make(v, p, n, 0);
    put_view(o, r, v, 0);
}

/* The arena bytes of a table's output columns: values and bitmap each. */
static size_t table_bytes(const char *layout, Py_ssize_t rows) {
    size_t n = 0;
    for (const char *c = layout; *c; c++)
        n += arena_round((size_t)values_size(*c, rows)) + arena_round((size_t)(rows + 7) / 8);
    return n;
}

/* The data buffers of a gathered text column: its chunks', by chunk (b"" for a chunk whose
 * texts are all inline: no view points there). */
static PyObject *chunk_data(const Table *t, int col) {
    PyObject *all = PyTuple_New(t->nbatches);
    for (Py_ssize_t b = 0; all && b < t->nbatches; b++) {
        PyObject *d = t->pieces[b * t->ncols + col].data_obj;
        PyObject *item = d == Py_None ? PyBytes_FromStringAndSize(NULL, 0) : Py_NewRef(d);
        if (!item) Py_CLEAR(all);
        else PyTuple_SET_ITEM(all, b, item);
    }
    return all;
}

/* An output table of `rows` rows, its columns zeroed in the arena: its Out columns, and the
 * Python tuple (rows, layout, cols) whose text columns take their data from data[c] (None: all
 * inline). Steals data's items. */
static PyObject *new_table(const char *layout, Py_ssize_t rows, Arena *arena, Out *outs,
                           PyObject **data) {
    Py_ssize_t ncols = (Py_ssize_t)strlen(layout);
    PyObject *cols = PyErr_Occurred() ? NULL : PyTuple_New(ncols), *table = NULL;
    if (!cols) goto done; /* (or a column's data could not be made) */
    for (Py_ssize_t c = 0; c < ncols; c++) {
        char letter = layout[c], *v = NULL, *b = NULL;
        PyObject *values = arena_span(arena, (size_t)values_size(letter, rows), &v);
        PyObject *bitmap = values ? arena_span(arena, (size_t)(rows + 7) / 8, &b) : NULL;
        PyObject *col = NULL;
        if (values && bitmap) {
            outs[c] = (Out){v, (uint8_t *)b, letter};
            if (letter == 't') {
                PyObject *d = data[c] ? data[c] : Py_NewRef(Py_None);
                data[c] = NULL;
                col = PyTuple_Pack(3, values, bitmap, d);
                Py_DECREF(d);
            } else {
                col = PyTuple_Pack(2, values, bitmap);
            }
        }
        Py_XDECREF(values);
        Py_XDECREF(bitmap);
        if (!col) goto done;
        PyTuple_SET_ITEM(cols, c, col);
    }
    table = Py_BuildValue("(nsO)", rows, layout, cols);
done:
    Py_XDECREF(cols);
    for (Py_ssize_t c = 0; c < ncols; c++) Py_CLEAR(data[c]);
    return table;
}

/* Row order[r] of input columns from[c] into row r of output columns o[c] of the same types
 * (from[c] < 0: left alone). Row by row: a row's chunk is looked up once for all its columns. */
static void gather(Out *o, const int *from, int n, const Table *t, const int32_t *order) {
    for (Py_ssize_t r = 0; r < t->rows; r++) {
        Py_ssize_t g = order[r], i = t->row_of[g];
        int32_t b = t->batch_of[g];
        const Piece *row = &t->pieces[(Py_ssize_t)b * t->ncols];
        for (int c = 0; c < n; c++) {
            if (from[c] < 0) continue;
            const Piece *p = &row[from[c]];
            if (!bit(p->bitmap, i)) continue;
            if (o[c].letter == 't') put_view(&o[c], r, (const unsigned char *)p->values + 16 * i, b);
            else put_int(&o[c], r, number_in(p, o[c].letter, i));
        }
    }
}

/* ---- sorting and look-ups ---- */

/* The rows in order of start time, stable (rows with equal times keep their order): Polars'
 * sort(..., maintain_order=True). A natural merge sort: a trace's rows come nearly in order
 * (a 10 MB trace's 19 k CPU rows hold 18 runs), so it merges a few runs, not log2(n) levels. */
static int32_t *stable_order(const Table *t, int start_col) {
    Py_ssize_t n = t->rows, runs = 0;
    int32_t *a = PyMem_RawMalloc((size_t)n * 4 + 4), *b = PyMem_RawMalloc((size_t)n * 4 + 4);
    int64_t *key = PyMem_RawMalloc((size_t)n * 8 + 8);
    Py_ssize_t *ends = PyMem_RawMalloc((size_t)n * sizeof *ends + sizeof *ends);
    if (!a || !b || !key || !ends) {
        PyMem_RawFree(a);
        PyMem_RawFree(b);
        PyMem_RawFree(key);
        PyMem_RawFree(ends);
        return NULL;
    }
    for (Py_ssize_t g = 0; g < n; g++) {
        a[g] = (int32_t)g;
        key[g] = number(t, start_col, g); /* start_ns is never null here */
        if (g && key[g] < key[g - 1]) ends[runs++] = g;
    }
    if (n) ends[runs++] = n;
    while (runs > 1) { /* merge runs pairwise; the left one first on ties */
        Py_ssize_t merged = 0;
        for (Py_ssize_t r = 0; r < runs; r += 2) {
            Py_ssize_t lo = r ? ends[r - 1] : 0, mid = ends[r], hi = r + 1 < runs ? ends[r + 1] : mid;
            Py_ssize_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) b[k++] = key[a[j]] < key[a[i]] ? a[j++] : a[i++];
            while (i < mid) b[k++] = a[i++];
            while (j < hi) b[k++] = a[j++];
            ends[merged++] = hi;
        }
        runs = merged;
        int32_t *swap = a;
        a = b;
        b = swap;
    }
    PyMem_RawFree(b);
    PyMem_RawFree(key);
    PyMem_RawFree(ends);
    return a;
}

/* An int64 -> row map, open addressing (ids are sparse and large). */
typedef struct {
    int64_t *keys;
    int32_t *rows; /* -1: empty */
    size_t mask;
} Map;

static int map_init(Map *m, Py_ssize_t n) {
    size_t size = 16;
    while (size < (size_t)n * 2) size *= 2;
    m->mask = size - 1;
    m->keys = PyMem_RawMalloc(size * 8);
    m->rows = PyMem_RawMalloc(size * 4);
    if (!m->keys || !m->rows) return -1;
    memset(m->rows, 0xff, size * 4);
    return 0;
}

static void map_free(Map *m) {
    PyMem_RawFree(m->keys);
    PyMem_RawFree(m->rows);
}

/* The slot of key: its row, or -1 where it is not there yet (then the key is set). */
static int32_t *map_slot(Map *m, int64_t key) {
    size_t h = (size_t)(((uint64_t)key * 0x9E3779B97F4A7C15u) >> 20) & m->mask;
    while (m->rows[h] != -1 && m->keys[h] != key) h = (h + 1) & m->mask;
    m->keys[h] = key;
    return &m->rows[h];
}

static int32_t map_get(const Map *m, int64_t key) {
    size_t h = (size_t)(((uint64_t)key * 0x9E3779B97F4A7C15u) >> 20) & m->mask;
    while (m->rows[h] != -1 && m->keys[h] != key) h = (h + 1) & m->mask;
    return m->rows[h];
}

/* The CPU rows' kinds that the joins look at: operators, and runtime or driver calls (the
 * API_KINDS), which carry the correlation ids and external ids of launches. */
enum { K_OTHER, K_OP, K_CALL };

static uint8_t *cpu_kinds(const Table *cpu, Py_ssize_t *calls) {
    uint8_t *kind = PyMem_RawMalloc((size_t)cpu->rows + 1);
    if (!kind) return NULL;
    *calls = 0;
    for (Py_ssize_t g = 0; g < cpu->rows; g++) {
        Text k = text(cpu, C_KIND, g);
        kind[g] = TEXT_IS(k, "op") ? K_OP : TEXT_IS(k, "runtime") || TEXT_IS(k, "driver") ? K_CALL
                                                                                     : K_OTHER;
        *calls += kind[g] == K_CALL;
    }
    return kind;
}

/* assemble._parent_ops: for each runtime or driver call, the name of the operator that shares
 * its external id, the latest such operator by start time (file order among equal times);
 * only ids some call carries count. parent[g] is that operator's row, or -1. */
static int parent_ops(const Table *cpu, const uint8_t *kind, Py_ssize_t calls, int32_t *parent) {
    Map ids = {0}, ops = {0};
    Py_ssize_t n = cpu->rows;
    int rc = -1;
    if (map_init(&ids, calls) || map_init(&ops, calls)) goto done;
    for (Py_ssize_t g = 0; g < n; g++)
        if (kind[g] == K_CALL && valid(cpu, C_EXTERNAL, g))
            *map_slot(&ids, number(cpu, C_EXTERNAL, g)) = 1;
    for (Py_ssize_t g = 0; g < n; g++) {
        if (kind[g] != K_OP || !valid(cpu, C_EXTERNAL, g)) continue;
        int64_t id = number(cpu, C_EXTERNAL, g);
        if (map_get(&ids, id) == -1) continue;
        int32_t *best = map_slot(&ops, id);
        if (*best == -1 || number(cpu, C_START, g) >= number(cpu, C_START, *best))
            *best = (int32_t)g;
    }
    for (Py_ssize_t g = 0; g < n; g++)
        parent[g] = kind[g] == K_CALL && valid(cpu, C_EXTERNAL, g)
                        ? map_get(&ops, number(cpu, C_EXTERNAL, g))
                        : -1;
    rc = 0;
done:
    map_free(&ids);
    map_free(&ops);
    return rc;
}

/* Whether text holds needle (lowercase ASCII), in any case: the regex (?i)graphlaunch. No
 * character outside ASCII folds to one of its letters. */
static int contains_folded(Text s, const char *needle) {
    int32_t n = (int32_t)strlen(needle);
    for (int32_t k = 0; k + n <= s.n; k++) {
        int32_t m = 0;
        while (m < n && ascii_lower(s.p[k + m]) == needle[m]) m++;
        if (m == n) return 1;
    }
    return 0;
}

/* ---- what a GPU activity's name says: assemble._name_columns ---- */

typedef struct {
    int category;         /* index of the first kernel pattern that matches, or -1: "other" */
    Text copy[3];         /* the copy regex's groups (n = -1: no match) */
    int amd;              /* AMD's copy direction: 0 none, else AMD_KINDS[amd - 1] */
} NameFacts;

static const char *const AMD_WORDS[] = {"hosttodevice", "devicetohost", "devicetodevice"};
static const char *const AMD_KINDS[] = {"HtoD", "DtoH", "DtoD"};

/* A run of (?-u:\w)+ at p[*k], then the literal lit: the run's end in *k, or 0. */
static int word_then(Text s, int32_t *k, Text *group, const char *lit) {
    int32_t at = *k, n = (int32_t)strlen(lit);
    while (at < s.n && ascii_word(s.p[at])) at++;
    if (at == *k || at + n > s.n || memcmp(s.p + at, lit, (size_t)n) != 0) return 0;
    *group = (Text){s.p + *k, at - *k};
    *k = at + n;
    return 1;
}

/* Memcpy ((?-u:\w)+) \(((?-u:\w)+) -> ((?-u:\w)+)\), its leftmost match. A group is a whole
 * run of word characters (each is followed by a literal that is not one), so there is at most
 * one match at each place. */
static void copy_groups(Text s, Text g[3]) {
    for (const char *at = s.p; (at = memmem(at, (size_t)(s.p + s.n - at), "Memcpy ", 7)); at++) {
        int32_t k = (int32_t)(at - s.p) + 7;
        if (word_then(s, &k, &g[0], " (") && word_then(s, &k, &g[1], " -> ") &&
            word_then(s, &k, &g[2], ")"))
            return;
    }
    g[0].n = g[1].n = g[2].n = -1;
}

/* The category patterns, compiled once for the process's reads: a batch worker reads trace after
 * trace, and compiling the patterns' DFAs was a part of each read worth saving (bench/NOTES.md,
 * round 15). Reference-counted (with
 * the GIL held), since a read on another thread may still search with a set that a newer tuple
 * of patterns has replaced. */
typedef struct {
    Py_ssize_t refs, n;
    PyObject *patterns; /* the tuple they come from, kept alive: compared by identity */
    Regex *re[];
} Compiled;

static Compiled *compiled_cache;

static void compiled_drop(Compiled *c) {
    if (!c || --c->refs) return;
    for (Py_ssize_t p = 0; p < c->n; p++) regex_free(c->re[p]);
    Py_XDECREF(c->patterns);
    PyMem_RawFree(c);
}

/* The compiled patterns (a reference to drop), or NULL: with an exception set, or without one
 * when a pattern is outside the matcher's syntax. */
static Compiled *compiled_patterns(PyObject *patterns) {
    if (compiled_cache && compiled_cache->patterns == patterns) {
        compiled_cache->refs++;
        return compiled_cache;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(patterns);
    Compiled *c = PyMem_RawCalloc(1, sizeof *c + ((size_t)n + 1) * sizeof(Regex *));
    if (!c) {
        PyErr_NoMemory();
        return NULL;
    }
    c->refs = 1;
    for (; c->n < n; c->n++) {
        Py_ssize_t len;
        const char *regex = PyUnicode_AsUTF8AndSize(
            PyTuple_GetItem(PyTuple_GET_ITEM(patterns, c->n), 1), &len);
        if (!regex || !(c->re[c->n] = regex_compile(regex, (size_t)len))) {
            compiled_drop(c);
            return NULL;
        }
    }
    c->patterns = Py_NewRef(patterns);
    compiled_drop(compiled_cache);
    compiled_cache = c;
    c->refs++;
    return c;
}

typedef struct {
    const Compiled *compiled;
    char *lowered; /* scratch for a lowercased name */
    size_t lowered_size;
} Matcher;

/* Facts of an ASCII name. Returns 0, or -1 when out of memory. */
static int name_facts(Matcher *m, Text s, NameFacts *f) {
    if ((size_t)s.n + 1 > m->lowered_size) {
        char *grown = PyMem_RawRealloc(m->lowered, (size_t)s.n + 1);
        if (!grown) return -1;
        m->lowered = grown;
        m->lowered_size = (size_t)s.n + 1;
    }
    for (int32_t k = 0; k < s.n; k++) m->lowered[k] = ascii_lower(s.p[k]);
    f->category = -1;
    for (Py_ssize_t p = 0; p < m->compiled->n && f->category < 0; p++)
        if (regex_search(m->compiled->re[p], m->lowered, (size_t)s.n)) f->category = (int)p;
    copy_groups(s, f->copy);
    /* The leftmost of the three words (they cannot start at the same place). */
    const char *first = NULL;
    f->amd = 0;
    for (int w = 0; w < 3; w++) {
        const char *at = memmem(m->lowered, (size_t)s.n, AMD_WORDS[w], strlen(AMD_WORDS[w]));
        if (at && (!first || at < first)) {
            first = at;
            f->amd = w + 1;
        }
    }
    return 0;
}

/* Distinct names, by their text: a name's facts are worked out once. */
typedef struct {
    uint64_t *hashes;
    Text *texts;
    int32_t *facts; /* index into the facts array; -1: empty slot */
    size_t mask;
} NameTable;

/* Of the length and both ends only: kernel names run to hundreds of bytes, and hashing all of
 * every row's name was most of the assembly's time. Names that share both ends are told apart
 * by comparing them whole. */
static uint64_t hash_text(Text s) {
    uint64_t h = 1469598103934665603u ^ (uint64_t)s.n;
    int32_t ends = s.n < 16 ? s.n : 16;
    for (int32_t k = 0; k < ends; k++) h = (h ^ (unsigned char)s.p[k]) * 1099511628211u;
    for (int32_t k = s.n - ends; k < s.n; k++) h = (h ^ (unsigned char)s.p[k]) * 1099511628211u;
    return h;
}

/* Short texts (Enum values, category labels), taken out of Python objects before the work
 * runs without the GIL. */
#define MAX_WORDS 32
typedef struct {
    Py_ssize_t n;
    const char *p[MAX_WORDS];
    Py_ssize_t len[MAX_WORDS];
} Words;

/* A tuple of str as Words (the UTF-8 stays valid while the tuple lives). */
static int words_of(PyObject *tuple, Words *w) {
    w->n = PyTuple_GET_SIZE(tuple);
    if (w->n > MAX_WORDS) {
        PyErr_SetString(PyExc_ValueError, "too many Enum values or categories");
        return -1;
    }
    for (Py_ssize_t k = 0; k < w->n; k++)
        if (!(w->p[k] = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(tuple, k), &w->len[k]))) return -1;
    return 0;
}

/* Whether text is one of the words (a cast to that Enum keeps it). */
static int member(Text s, const Words *w) {
    for (Py_ssize_t k = 0; k < w->n; k++)
        if (w->len[k] == s.n && memcmp(w->p[k], s.p, (size_t)s.n) == 0) return 1;
    return 0;
}

/* The labels a category column takes (the patterns' categories, then "other", "memcpy",
 * "memset"), as views into one data buffer that holds their texts one after another. */
typedef struct {
    Py_ssize_t n;
    unsigned char views[MAX_WORDS][16];
} Labels;

/* What the name-derived columns need, fixed before the work starts. */
typedef struct {
    Matcher *m;
    const Words *copy_kinds, *memory_kinds;
    const Labels *labels;
} NameRules;

/* The GPU frame's columns from the name: category, copy_kind, src_kind, dst_kind (o[0..3]).
 * Returns 0, 1 to decline (a name that is not ASCII), or -1 when out of memory. */
static int name_columns(const Table *gpu, const int32_t *order, const NameRules *rules, Out o[4]) {
    Py_ssize_t n = gpu->rows, n_facts = 0, n_labels = rules->labels->n;
    NameTable names = {0};
    NameFacts *facts = PyMem_RawMalloc((size_t)n * sizeof *facts + 1);
    size_t size = 16;
    while (size < (size_t)n * 2) size *= 2;
    names.mask = size - 1;
    names.hashes = PyMem_RawMalloc(size * 8);
    names.texts = PyMem_RawMalloc(size * sizeof(Text));
    names.facts = PyMem_RawMalloc(size * 4);
    int rc = -1;
    if (!facts || !names.hashes || !names.texts || !names.facts) goto done;
    memset(names.facts, 0xff, size * 4);
    for (Py_ssize_t r = 0; r < n; r++) {
        Py_ssize_t g = order[r];
        Text kind = text(gpu, G_KIND, g);
        int has_name = valid(gpu, G_NAME, g);
        Text name = has_name ? text(gpu, G_NAME, g) : (Text){NULL, 0};
        NameFacts *f = NULL, none = {-1, {{NULL, -1}, {NULL, -1}, {NULL, -1}}, 0};
        if (has_name) {
            uint64_t h = hash_text(name);
            size_t slot = (size_t)(h >> 7) & names.mask;
            while (names.facts[slot] != -1 &&
                   !(names.hashes[slot] == h && names.texts[slot].n == name.n &&
                     memcmp(names.texts[slot].p, name.p, (size_t)name.n) == 0))
                slot = (slot + 1) & names.mask;
            if (names.facts[slot] == -1) {
                if (!ascii_only(name.p, name.n)) {
                    rc = 1;
                    goto done;
                }
                if (name_facts(rules->m, name, &facts[n_facts])) goto done;
                names.hashes[slot] = h;
                names.texts[slot] = name;
                names.facts[slot] = (int32_t)n_facts++;
            }
            f = &facts[names.facts[slot]];
        } else {
            f = &none;
        }
        /* category: memcpy and memset by kind, kernels by name ("other": none matched). */
        Py_ssize_t label = TEXT_IS(kind, "memcpy")   ? n_labels - 2
                           : TEXT_IS(kind, "memset") ? n_labels - 1
                           : f->category >= 0        ? f->category
                                                     : n_labels - 3;
        put_view(&o[0], r, rules->labels->views[label], 0);
        /* copy_kind: memcpy only, the name's direction, else AMD's; null outside the Enum. */
        if (TEXT_IS(kind, "memcpy")) {
            if (f->copy[0].n >= 0) {
                if (member(f->copy[0], rules->copy_kinds))
                    put_literal(&o[1], r, f->copy[0].p, f->copy[0].n);
            } else if (f->amd) {
                put_literal(&o[1], r, AMD_KINDS[f->amd - 1], 4);
            }
        }
        /* src_kind, dst_kind: the copy regex's groups, lowercased, for any kind. */
        for (int side = 1; side <= 2; side++) {
            Text g = f->copy[side];
            char low[VIEW_INLINE];
            if (g.n < 0 || g.n > VIEW_INLINE) continue; /* no Enum value is longer */
            for (int32_t k = 0; k < g.n; k++) low[k] = ascii_lower(g.p[k]);
            if (member((Text){low, g.n}, rules->memory_kinds)) put_literal(&o[1 + side], r, low, g.n);
        }
    }
    rc = 0;
done:
    PyMem_RawFree(facts);
    PyMem_RawFree(names.hashes);
    PyMem_RawFree(names.texts);
    PyMem_RawFree(names.facts);
    return rc;
}

/* ---- the frames ---- */

/* Whether two GPU rows hold the same five numbers that assemble._deduplicated_gpu hashes first
 * (nulls equal to nulls). */
static int same_numbers(const Table *t, Py_ssize_t a, Py_ssize_t b) {
    static const int cols[] = {G_START, G_END, G_DEVICE, G_STREAM, G_CORRELATION};
    for (int k = 0; k < 5; k++) {
        int va = valid(t, cols[k], a), vb = valid(t, cols[k], b);
        if (va != vb || (va && number(t, cols[k], a) != number(t, cols[k], b))) return 0;
    }
    return 1;
}

/* Whether the GPU rows, sorted by start, may hold duplicates: two rows with the same five
 * numbers (then the reference compares whole rows and drops copies, which is left to it), or a
 * run of equal starts too long to compare pairwise. */
static int may_have_duplicates(const Table *gpu, const int32_t *order) {
    for (Py_ssize_t lo = 0, hi; lo < gpu->rows; lo = hi) {
        int64_t start = number(gpu, G_START, order[lo]);
        for (hi = lo + 1; hi < gpu->rows && number(gpu, G_START, order[hi]) == start; hi++) {}
        if (hi - lo > 64) return 1;
        for (Py_ssize_t i = lo; i < hi; i++)
            for (Py_ssize_t j = i + 1; j < hi; j++)
                if (same_numbers(gpu, order[i], order[j])) return 1;
    }
    return 0;
}

static void fill_rank(Out *o, Py_ssize_t rows, int rank) {
    for (Py_ssize_t r = 0; r < rows; r++) put_int(o, r, rank);
}

/* The output tables (made with the GIL, filled without it), and their columns. */
typedef struct {
    PyObject *tables[N_TABLES];
    Out cpu[15], gpu[23], annotations[9], syncs[9];
} Frames;

static int new_frames(Frames *f, const Table *t, Arena *arena, PyObject *label_data) {
    PyObject *cpu[15] = {0}, *gpu[23] = {0}, *annotations[9] = {0}, *syncs[9] = {0};
    cpu[4] = chunk_data(&t[T_CPU], C_NAME);
    cpu[9] = chunk_data(&t[T_CPU], C_DIMS);
    cpu[10] = chunk_data(&t[T_CPU], C_TYPES);
    cpu[11] = chunk_data(&t[T_CPU], C_STACK);
    cpu[12] = chunk_data(&t[T_CPU], C_NAME); /* parent_op: operators' names */
    cpu[13] = chunk_data(&t[T_CPU], C_CONCRETE);
    gpu[4] = chunk_data(&t[T_GPU], G_NAME);
    gpu[5] = Py_NewRef(label_data);
    annotations[4] = chunk_data(&t[T_ANNOTATIONS], A_NAME);
    syncs[5] = chunk_data(&t[T_SYNCS], S_TYPE);
    PyObject **data[N_TABLES] = {cpu, gpu, annotations, syncs};
    Out *outs[N_TABLES] = {f->cpu, f->gpu, f->annotations, f->syncs};
    int rc = 0;
    for (int k = 0; k < N_TABLES; k++) /* each takes its data, made or not */
        if (!(f->tables[k] = new_table(OUT_LAYOUT[k], t[k].rows, arena, outs[k], data[k]))) rc = -1;
    return rc;
}

static void fill_cpu(Out *o, const Table *cpu, const int32_t *order, const int32_t *parent,
                     int rank) {
    static const int from[] = {-1, C_PID, C_TID, C_KIND, C_NAME, C_START, C_END, C_CORRELATION,
                               C_EXTERNAL, C_DIMS, C_TYPES, C_STACK, -1 /* parent_op */,
                               C_CONCRETE, C_FLOPS};
    fill_rank(&o[0], cpu->rows, rank);
    gather(o, from, 15, cpu, order);
    for (Py_ssize_t r = 0; r < cpu->rows; r++) {
        int32_t op = parent[order[r]];
        if (op >= 0) put_view(&o[12], r, view(cpu, C_NAME, op), cpu->batch_of[op]);
    }
}

/* The launch call of each correlation id: the first in time (file order among equal times),
 * as assemble._launches keeps it. */
static int launches(const Table *cpu, const int32_t *order, const uint8_t *kind,
                    Py_ssize_t calls, Map *first) {
    if (map_init(first, calls)) return -1;
    for (Py_ssize_t r = 0; r < cpu->rows; r++) {
        Py_ssize_t g = order[r];
        if (kind[g] != K_CALL || !valid(cpu, C_CORRELATION, g)) continue;
        int32_t *slot = map_slot(first, number(cpu, C_CORRELATION, g));
        if (*slot == -1) *slot = (int32_t)g;
    }
    return 0;
}

/* graph_launched of each GPU row (o), from its launch call; returns the kernels without one. */
static Py_ssize_t fill_launched(Out *o, const Table *gpu, const int32_t *order, const Table *cpu,
                                const Map *first_launch) {
    Py_ssize_t without_launch = 0;
    for (Py_ssize_t r = 0; r < gpu->rows; r++) {
        Py_ssize_t g = order[r];
        int32_t call = valid(gpu, G_CORRELATION, g)
                           ? map_get(first_launch, number(gpu, G_CORRELATION, g)) : -1;
        if (call >= 0 && valid(cpu, C_NAME, call)) {
            if (contains_folded(text(cpu, C_NAME, call), "graphlaunch"))
                o->values[r >> 3] |= (char)(1u << (r & 7));
            mark(o, r);
        } else if (TEXT_IS(text(gpu, G_KIND, g), "kernel")) {
            without_launch++; /* launched before profiling began: no launch call */
        }
    }
    return without_launch;
}

/* The GPU side, on a thread of its own while the CPU side runs: the GPU rows' order, the
 * duplicate check, and the columns that do not need the CPU rows. */
typedef struct {
    const Table *gpu;
    const NameRules *rules;
    Out *o;
    int rank;
    int32_t *order; /* out */
    int rc;         /* out: 0, 1 to decline, -1 out of memory */
} GpuWork;

static void *gpu_work(void *arg) {
    static const int from[] = {-1, G_DEVICE, G_STREAM, G_KIND, G_NAME, -1, G_START, G_END,
                               G_CORRELATION, G_EXTERNAL, G_GRID, G_GRID + 1, G_GRID + 2,
                               G_BLOCK, G_BLOCK + 1, G_BLOCK + 2, G_REGISTERS, G_SHARED, G_BYTES};
    GpuWork *w = arg;
    if (!(w->order = stable_order(w->gpu, G_START))) {
        w->rc = -1;
        return NULL;
    }
    if (may_have_duplicates(w->gpu, w->order)) {
        w->rc = 1;
        return NULL;
    }
    fill_rank(&w->o[0], w->gpu->rows, w->rank);
    gather(w->o, from, 19, w->gpu, w->order);
    Out names[4] = {w->o[5], w->o[19], w->o[20], w->o[21]};
    w->rc = name_columns(w->gpu, w->order, w->rules, names);
    return NULL;
}

/* The CPU side, and the small tables: 0, or -1 out of memory. */
static int cpu_work(const Table *t, Frames *f, int rank, int32_t *order[N_TABLES],
                    Map *first_launch) {
    static const int ann_from[] = {-1, A_PID, A_TID, A_KIND, A_NAME, A_START, A_END, A_STEP};
    static const int sync_from[] = {-1, S_PID, S_TID, S_DEVICE, S_STREAM, S_TYPE, S_START, S_END,
                                    S_CORRELATION};
    const Table *cpu = &t[T_CPU];
    Py_ssize_t calls = 0;
    uint8_t *kind = NULL;
    int32_t *parent = PyMem_RawMalloc((size_t)cpu->rows * 4 + 4);
    int rc = -1;
    if (!parent || !(order[T_CPU] = stable_order(cpu, C_START)) ||
        !(kind = cpu_kinds(cpu, &calls)) || parent_ops(cpu, kind, calls, parent) ||
        launches(cpu, order[T_CPU], kind, calls, first_launch))
        goto done;
    fill_cpu(f->cpu, cpu, order[T_CPU], parent, rank);
    if (!(order[T_ANNOTATIONS] = stable_order(&t[T_ANNOTATIONS], A_START)) ||
        !(order[T_SYNCS] = stable_order(&t[T_SYNCS], S_START)))
        goto done;
    fill_rank(&f->annotations[0], t[T_ANNOTATIONS].rows, rank);
    gather(f->annotations, ann_from, 8, &t[T_ANNOTATIONS], order[T_ANNOTATIONS]);
    fill_rank(&f->syncs[0], t[T_SYNCS].rows, rank); /* domain: null (an NVTX field) */
    gather(f->syncs, sync_from, 9, &t[T_SYNCS], order[T_SYNCS]);
    rc = 0;
done:
    PyMem_RawFree(parent);
    PyMem_RawFree(kind);
    return rc;
}

/* The category labels and one buffer of their texts, which the category column's views point
 * into. */
static int category_labels(PyObject *patterns, Labels *labels, PyObject **data) {
    static const char *const MORE[] = {"other", "memcpy", "memset"};
    Py_ssize_t n = PyTuple_GET_SIZE(patterns), size = 0, len[MAX_WORDS];
    const char *text[MAX_WORDS];
    if (n + 3 > MAX_WORDS) {
        PyErr_SetString(PyExc_ValueError, "too many categories");
        return -1;
    }
    for (Py_ssize_t k = 0; k < n + 3; k++) {
        PyObject *label = k < n ? PyTuple_GetItem(PyTuple_GET_ITEM(patterns, k), 0) : NULL;
        if (k >= n) {
            text[k] = MORE[k - n];
            len[k] = (Py_ssize_t)strlen(text[k]);
        } else if (!label || !PyUnicode_Check(label) ||
                   !(text[k] = PyUnicode_AsUTF8AndSize(label, &len[k]))) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "a category is a str");
            return -1;
        }
        size += len[k];
    }
    if (!(*data = PyBytes_FromStringAndSize(NULL, size))) return -1;
    labels->n = n + 3;
    for (Py_ssize_t k = 0, offset = 0; k < n + 3; k++) {
        memcpy(PyBytes_AS_STRING(*data) + offset, text[k], (size_t)len[k]);
        view_make(labels->views[k], text[k], (int32_t)len[k], (int32_t)offset);
        offset += len[k];
    }
    return 0;
}

static PyObject *assemble(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *specs[N_TABLES], *patterns, *copy_kinds, *memory_kinds, *result = NULL;
    PyObject *label_data = NULL;
    int rank;
    if (!PyArg_ParseTuple(args, "OOOOiO!O!O!", &specs[0], &specs[1], &specs[2], &specs[3], &rank,
                          &PyTuple_Type, &patterns, &PyTuple_Type, &copy_kinds, &PyTuple_Type,
                          &memory_kinds))
        return NULL;
    Table t[N_TABLES] = {{0}};
    int32_t *order[N_TABLES] = {0};
    Map first_launch = {0};
    Matcher m = {0};
    Arena *arena = NULL;
    Frames frames = {0};
    Words copy_words, memory_words;
    Labels labels;
    for (int k = 0; k < N_TABLES; k++)
        if (load_table(specs[k], k, &t[k])) goto done;
    if (words_of(copy_kinds, &copy_words) || words_of(memory_kinds, &memory_words) ||
        category_labels(patterns, &labels, &label_data))
        goto done;
    if (!(m.compiled = compiled_patterns(patterns))) {
        if (!PyErr_Occurred()) result = Py_NewRef(Py_None); /* not a syntax it knows */
        goto done;
    }
    size_t bytes = 0;
    for (int k = 0; k < N_TABLES; k++) bytes += table_bytes(OUT_LAYOUT[k], t[k].rows);
    if (!(arena = arena_new(bytes)) || new_frames(&frames, t, arena, label_data)) goto done;

    /* The GPU side on a second thread while this one does the CPU side: they share nothing
     * but their input, and a small trace's read waits for both (bench/NOTES.md, round 15). */
    NameRules rules = {&m, &copy_words, &memory_words, &labels};
    GpuWork gpu = {&t[T_GPU], &rules, frames.gpu, rank, NULL, 0};
    int cpu_rc;
    Py_ssize_t without_launch = 0;
    Py_BEGIN_ALLOW_THREADS
    pthread_t thread;
    int threaded = pthread_create(&thread, NULL, gpu_work, &gpu) == 0;
    cpu_rc = cpu_work(t, &frames, rank, order, &first_launch);
    if (threaded) pthread_join(thread, NULL);
    else gpu_work(&gpu);
    order[T_GPU] = gpu.order;
    if (!cpu_rc && !gpu.rc)
        without_launch = fill_launched(&frames.gpu[22], &t[T_GPU], gpu.order, &t[T_CPU],
                                       &first_launch);
    Py_END_ALLOW_THREADS
    if (cpu_rc || gpu.rc < 0) goto nomemory;
    if (gpu.rc > 0) { /* a name that is not ASCII, or maybe duplicate rows */
        result = Py_NewRef(Py_None);
        goto done;
    }
    result = Py_BuildValue("(n(OOOO))", without_launch, frames.tables[0], frames.tables[1],
                           frames.tables[2], frames.tables[3]);
    goto done;
nomemory:
    if (!PyErr_Occurred()) PyErr_NoMemory();
done:
    for (int k = 0; k < N_TABLES; k++) {
        Py_XDECREF(frames.tables[k]);
        drop_table(&t[k]);
        PyMem_RawFree(order[k]);
    }
    compiled_drop((Compiled *)m.compiled);
    PyMem_RawFree(m.lowered);
    map_free(&first_launch);
    Py_XDECREF(label_data);
    Py_XDECREF(arena);
    return result;
}

/* search(pattern, texts) -> [bool] | None (a pattern it refuses): the category matcher's
 * answers, which the tests hold against Polars' str.contains. */
static PyObject *search(PyObject *self, PyObject *args) {
    (void)self;
    const char *pattern;
    Py_ssize_t n;
    PyObject *texts;
    if (!PyArg_ParseTuple(args, "s#O!", &pattern, &n, &PyList_Type, &texts)) return NULL;
    Regex *re = regex_compile(pattern, (size_t)n);
    if (!re) Py_RETURN_NONE;
    PyObject *out = PyList_New(PyList_GET_SIZE(texts));
    for (Py_ssize_t i = 0; out && i < PyList_GET_SIZE(texts); i++) {
        Py_ssize_t len;
        const char *text = PyUnicode_AsUTF8AndSize(PyList_GET_ITEM(texts, i), &len);
        if (!text) Py_CLEAR(out);
        else PyList_SET_ITEM(out, i, PyBool_FromLong(regex_search(re, text, (size_t)len)));
    }
    regex_free(re);
    return out;
}

static PyMethodDef METHODS[] = {
    {"assemble", assemble, METH_VARARGS,
     "The canonical frames' columns from one group of reduced chunks, or None."},
    {"search", search, METH_VARARGS,
     "search(pattern, texts): whether the category matcher finds pattern in each text, or None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_eventassemble", NULL, -1, METHODS,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__eventassemble(void) {
    return arena_types_ready() ? NULL : PyModule_Create(&MODULE);
}
