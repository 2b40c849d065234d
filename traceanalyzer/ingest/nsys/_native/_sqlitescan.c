/* Integer columns of one SQLite table, read from the file's pages without SQLite.
 *
 * SQLite's own engine costs ~80 ns a value on the benchmark machine (its virtual machine runs
 * opcodes per column of every row, through connectorx or its C API alike: bench/NOTES.md), and
 * the runtime and kernel tables of a 1 GB export hold ~190 M values. Their pages are simple:
 * a table b-tree (https://www.sqlite.org/fileformat2.html) whose leaves hold records of
 * varint-typed values, which this reads in one pass.
 *
 * Everything read is checked against the file: a page number, cell, record header or overflow
 * chain that does not fit is an error (ValueError), never a read out of bounds, and the caller
 * then reads the table through SQLite, which gives its own message. Declined (ValueError too):
 * a database in WAL mode (its newest pages may lie in the -wal file), a root page that is not a
 * table b-tree (WITHOUT ROWID), and a file that changes while it is read.
 *
 * Values: an integer as itself; NULL, a real, a text or a blob as missing (as the typed reads
 * of sqlite_columns.py give them); in an int32 column, an integer beyond int32 as missing. A record shorter than a column (a column added later) reads
 * it as missing. The rowid-alias column (INTEGER PRIMARY KEY), whose record value is NULL,
 * reads the rowid.
 *
 * Output: per column (values, bitmap), int64 or int32 values and an Arrow validity bitmap, in
 * buffers this module owns, and the Arrow C stream export of _arrowstream.h to hand them to
 * Polars without a copy. The scan itself runs without the GIL. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "_arrowstream.h"

#define MAX_COLUMNS 64
#define WINDOW_BYTES (1u << 20)    /* consecutive leaves read in one pread */

/* ---- column memory ---- */

/* A growing column: on Linux an anonymous mapping, grown with mremap (no copy; a fresh mapping
 * reads as zeros, as a bitmap starts). Elsewhere, realloc and a clear. (Polars' own allocator,
 * which it hands to plugins, was tried so that Polars would reuse the columns' memory once it
 * drops them: 5% fewer page faults, no faster: bench/NOTES.md, "nsys pages".) */
typedef struct {
    uint8_t *p;
    size_t size; /* bytes held */
} Grown;

static int grown_resize(Grown *g, size_t want) {
    size_t size = want ? want : 1;
#if defined(__linux__)
    void *q = g->p ? mremap(g->p, g->size, size, MREMAP_MAYMOVE)
                   : mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (q == MAP_FAILED) return -1;
#else
    uint8_t *q = realloc(g->p, size);
    if (!q) return -1;
    if (size > g->size) memset(q + g->size, 0, size - g->size);
#endif
    g->p = q;
    g->size = size;
    return 0;
}

static void grown_free(Grown *g) {
    if (!g->p) return;
#if defined(__linux__)
    munmap(g->p, g->size);
#else
    free(g->p);
#endif
    *g = (Grown){0};
}

/* ---- a column's memory, exported through the buffer protocol ---- */

typedef struct {
    PyObject_HEAD
    Grown mem;
    Py_ssize_t size; /* bytes of data in it */
} Owned;

static int owned_getbuffer(Owned *self, Py_buffer *view, int flags) {
    return PyBuffer_FillInfo(view, (PyObject *)self, self->mem.p, self->size, 1, flags);
}

static void owned_dealloc(Owned *self) {
    grown_free(&self->mem);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyBufferProcs OWNED_BUFFER = {.bf_getbuffer = (getbufferproc)owned_getbuffer};

static PyTypeObject OwnedType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_sqlitescan.Owned",
    .tp_basicsize = sizeof(Owned),
    .tp_dealloc = (destructor)owned_dealloc,
    .tp_as_buffer = &OWNED_BUFFER,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Memory of a column read from the pages.",
};

/* Takes ``mem`` (freed with the object, or here on failure). */
static PyObject *owned_new(Grown *mem, Py_ssize_t size) {
    Owned *o = PyObject_New(Owned, &OwnedType);
    if (!o) {
        grown_free(mem);
        return NULL;
    }
    o->mem = *mem;
    o->size = size;
    *mem = (Grown){0};
    return (PyObject *)o;
}

/* ---- the file ---- */

typedef struct {
    int fd;
    uint32_t page_size, usable, n_pages;
    uint32_t counter; /* the file change counter when the scan began */
    uint8_t *window;  /* pages [win_first, win_first + win_count) */
    uint32_t win_first, win_count, win_cap;
    uint8_t *scratch; /* one page: interior and overflow pages */
    uint64_t overflow_left; /* overflow bytes a scan may still read: the file's, once */
    const char *error;
} Db;

static uint32_t be16(const uint8_t *p) { return (uint32_t)p[0] << 8 | p[1]; }
static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int read_at(Db *db, void *buf, size_t n, off_t at) {
    size_t done = 0;
    while (done < n) {
        ssize_t got = pread(db->fd, (uint8_t *)buf + done, n - done, at + (off_t)done);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
            db->error = "the file is shorter than its pages";
            return -1;
        }
        done += (size_t)got;
    }
    return 0;
}

static int check_page(Db *db, uint32_t pgno) {
    if (pgno < 1 || pgno > db->n_pages) {
        db->error = "a page number beyond the file";
        return -1;
    }
    return 0;
}

/* One page into the scratch buffer. */
static const uint8_t *page_alone(Db *db, uint32_t pgno) {
    if (check_page(db, pgno)) return NULL;
    if (read_at(db, db->scratch, db->page_size, (off_t)(pgno - 1) * db->page_size)) return NULL;
    return db->scratch;
}

static int open_db(Db *db, const char *path) {
    uint8_t h[100];
    memset(db, 0, sizeof *db);
    db->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (db->fd < 0) {
        db->error = "cannot open the file";
        return -1;
    }
    struct stat st;
    if (fstat(db->fd, &st) || read_at(db, h, sizeof h, 0)) {
        db->error = "cannot read the file's header";
        return -1;
    }
    if (memcmp(h, "SQLite format 3", 16)) {
        db->error = "not a SQLite file";
        return -1;
    }
    uint32_t size = be16(h + 16) == 1 ? 65536 : be16(h + 16);
    if (size < 512 || size > 65536 || (size & (size - 1)) || h[20] > size - 480) {
        db->error = "a page size or reserved space SQLite does not write";
        return -1;
    }
    if (h[18] != 1 || h[19] != 1) {
        db->error = "a WAL database (its newest pages may lie in the -wal file)";
        return -1;
    }
    db->page_size = size;
    db->usable = size - h[20];
    db->counter = be32(h + 24);
    uint64_t in_file = (uint64_t)st.st_size / size;
    uint32_t said = be32(h + 28);
    db->n_pages = (said && be32(h + 92) == db->counter && said <= in_file)
                      ? said : (uint32_t)(in_file > UINT32_MAX ? UINT32_MAX : in_file);
    /* Each overflow page of a real file belongs to one record: chains that would read more
     * than the file (a damaged file's cycles) stop the scan instead of taking quadratic time. */
    db->overflow_left = (uint64_t)db->n_pages * db->usable;
    db->win_cap = WINDOW_BYTES / size ? WINDOW_BYTES / size : 1;
    db->window = malloc((size_t)db->win_cap * size);
    db->scratch = malloc(size);
    if (!db->window || !db->scratch) {
        db->error = "out of memory";
        return -1;
    }
    return 0;
}

static void close_db(Db *db) {
    if (db->fd >= 0) close(db->fd);
    free(db->window);
    free(db->scratch);
}

/* A varint at p (no further than end): its length, or 0 where it runs past end. */
static int varint(const uint8_t *p, const uint8_t *end, uint64_t *out) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) {
        if (p + i >= end) return 0;
        v = v << 7 | (p[i] & 0x7f);
        if (!(p[i] & 0x80)) {
            *out = v;
            return i + 1;
        }
    }
    if (p + 8 >= end) return 0;
    *out = v << 8 | p[8];
    return 9;
}

/* ---- the leaves of the tree, in order ---- */

typedef struct {
    uint32_t *pages;
    size_t n, cap;
} Pages;

static int push(Pages *s, uint32_t pgno) {
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 1024;
        uint32_t *grown = realloc(s->pages, cap * sizeof *grown);
        if (!grown) return -1;
        s->pages = grown;
        s->cap = cap;
    }
    s->pages[s->n++] = pgno;
    return 0;
}

/* The leaf pages under ``root``, left to right. A table b-tree is balanced, so the tree is
 * read a level at a time, and a level whose first page is a leaf is the leaves, which are not
 * read here (the scan checks each). A page met twice (a cycle, or two parents) is an error. */
static int list_leaves(Db *db, uint32_t root, Pages *leaves) {
    Pages level = {0}, next = {0};
    uint8_t *seen = calloc((size_t)db->n_pages / 8 + 1, 1);
    int rc = -1;
    if (!seen || push(&level, root)) goto oom;
    for (int depth = 0;; depth++) {
        if (depth > 64) {
            db->error = "a tree deeper than SQLite builds";
            goto done;
        }
        next.n = 0;
        for (size_t i = 0; i < level.n; i++) {
            uint32_t pgno = level.pages[i];
            if (check_page(db, pgno)) goto done;
            if (seen[pgno / 8] & (1u << (pgno % 8))) {
                db->error = "a page in the tree twice";
                goto done;
            }
            seen[pgno / 8] |= (uint8_t)(1u << (pgno % 8));
            if (i && next.n == 0) continue; /* the leaves: marked, not read */
            const uint8_t *page = page_alone(db, pgno);
            if (!page) goto done;
            uint32_t at = pgno == 1 ? 100 : 0;
            if (page[at] == 0x0d && i == 0) continue; /* this level is the leaves */
            if (page[at] != 0x05) {
                db->error = pgno == root ? "not a table b-tree (WITHOUT ROWID?)"
                                         : "a tree whose levels are not all interior pages";
                goto done;
            }
            uint32_t cells = be16(page + at + 3);
            if (at + 12 + 2 * (size_t)cells > db->usable) {
                db->error = "an interior page's cells do not fit";
                goto done;
            }
            for (uint32_t c = 0; c < cells; c++) {
                uint32_t off = be16(page + at + 12 + 2 * c);
                if (off < at + 12 + 2 * cells || off + 4 > db->usable) {
                    db->error = "an interior cell outside its page";
                    goto done;
                }
                if (push(&next, be32(page + off))) goto oom;
            }
            if (push(&next, be32(page + at + 8))) goto oom;
        }
        if (!next.n) break; /* level holds the leaves */
        Pages swap = level;
        level = next;
        next = swap;
    }
    free(leaves->pages);
    *leaves = level;
    level.pages = NULL;
    rc = 0;
    goto done;
oom:
    db->error = "out of memory";
done:
    free(level.pages);
    free(next.pages);
    free(seen);
    return rc;
}

/* ---- the columns ---- */

typedef struct {
    int ncols;
    int index[MAX_COLUMNS]; /* the column's position in the record */
    int alias;              /* the output column that is the rowid alias, or -1 */
    int last;               /* the largest index */
    int want[MAX_COLUMNS];  /* by position in the record: the output column, or -1 */
    char letter[MAX_COLUMNS]; /* 'l' int64 or 'i' int32 (a value beyond it is missing) */
    Grown values[MAX_COLUMNS];
    Grown bitmap[MAX_COLUMNS];
    size_t rows, cap;
    size_t expect;    /* rows expected: the first capacity */
    uint8_t *payload; /* a record with overflow pages, put together */
    size_t payload_cap;
} Out;

static size_t width(char letter) { return letter == 'i' ? sizeof(int32_t) : sizeof(int64_t); }

static int grow(Out *o) {
    size_t cap = o->cap ? o->cap * 2 : o->expect ? o->expect : 1024;
    for (int c = 0; c < o->ncols; c++)
        if (grown_resize(&o->values[c], cap * width(o->letter[c])) ||
            grown_resize(&o->bitmap[c], cap / 8 + 1))
            return -1;
    o->cap = cap;
    return 0;
}

static int64_t int_of(const uint8_t *p, int n) {
    uint64_t v = p[0] & 0x80 ? ~(uint64_t)0 : 0; /* sign-extended, big-endian */
    for (int i = 0; i < n; i++) v = v << 8 | p[i];
    return (int64_t)v;
}

static const int INT_BYTES[10] = {0, 1, 2, 3, 4, 6, 8, 8, 0, 0};

/* One record (``len`` bytes at ``rec``) of row ``rowid`` into the output. */
static int put_record(Db *db, Out *o, const uint8_t *rec, uint64_t len, int64_t rowid) {
    const uint8_t *end = rec + len;
    uint64_t header;
    int n = varint(rec, end, &header);
    if (!n || header > len || header < (uint64_t)n) {
        db->error = "a record header that does not fit";
        return -1;
    }
    if (o->rows == o->cap && grow(o)) {
        db->error = "out of memory";
        return -1;
    }
    size_t row = o->rows++;
    const uint8_t *type = rec + n, *types_end = rec + header, *body = types_end;
    int64_t found[MAX_COLUMNS];
    uint8_t valid[MAX_COLUMNS];
    memset(valid, 0, sizeof valid);
    /* Each position up to the last wanted: its serial type, and where its value lies. */
    for (int col = 0; col <= o->last && type < types_end; col++) {
        uint64_t t;
        int k = varint(type, types_end, &t);
        if (!k || t == 10 || t == 11) {
            db->error = "a record's types do not fit";
            return -1;
        }
        type += k;
        uint64_t size = t < 10 ? (uint64_t)INT_BYTES[t] : (t - 12) / 2;
        if (size > (uint64_t)(end - body)) {
            db->error = "a record's values do not fit";
            return -1;
        }
        int c = o->want[col];
        if (c >= 0) {
            if (t >= 1 && t <= 6) {
                found[c] = int_of(body, INT_BYTES[t]);
                valid[c] = 1;
            } else if (t == 8 || t == 9) {
                found[c] = t == 9;
                valid[c] = 1;
            }
        }
        body += size;
    }
    for (int c = 0; c < o->ncols; c++) {
        if (c == o->alias && !valid[c]) {
            found[c] = rowid;
            valid[c] = 1;
        }
        if (o->letter[c] == 'i') {
            if (valid[c] && (found[c] < INT32_MIN || found[c] > INT32_MAX)) valid[c] = 0;
            ((int32_t *)o->values[c].p)[row] = valid[c] ? (int32_t)found[c] : 0;
        } else {
            ((int64_t *)o->values[c].p)[row] = valid[c] ? found[c] : 0;
        }
        if (valid[c]) o->bitmap[c].p[row / 8] |= (uint8_t)(1u << (row % 8));
    }
    return 0;
}

/* A cell's payload with overflow pages, put together in o->payload. */
static const uint8_t *assemble(Db *db, Out *o, const uint8_t *local, uint32_t n_local,
                               uint32_t first, uint64_t total) {
    if (total - n_local > db->overflow_left) {
        db->error = "overflow chains longer than the file";
        return NULL;
    }
    db->overflow_left -= total - n_local;
    if (total > o->payload_cap) {
        uint8_t *grown = realloc(o->payload, total);
        if (!grown) {
            db->error = "out of memory";
            return NULL;
        }
        o->payload = grown;
        o->payload_cap = total;
    }
    memcpy(o->payload, local, n_local);
    uint64_t have = n_local;
    uint32_t pgno = first;
    for (uint32_t hops = 0; have < total; hops++) {
        const uint8_t *page = hops < db->n_pages ? page_alone(db, pgno) : NULL;
        if (!page) {
            if (!db->error) db->error = "an overflow chain longer than the file";
            return NULL;
        }
        uint64_t take = total - have < db->usable - 4 ? total - have : db->usable - 4;
        memcpy(o->payload + have, page + 4, take);
        have += take;
        pgno = be32(page);
    }
    return o->payload;
}

static int put_leaf(Db *db, Out *o, const uint8_t *page, uint32_t pgno) {
    uint32_t at = pgno == 1 ? 100 : 0, u = db->usable;
    uint32_t cells = be16(page + at + 3);
    if (at + 8 + 2 * (size_t)cells > u) {
        db->error = "a leaf's cells do not fit";
        return -1;
    }
    uint32_t max_local = u - 35, min_local = (u - 12) * 32 / 255 - 23;
    const uint8_t *end = page + u;
    for (uint32_t c = 0; c < cells; c++) {
        uint32_t off = be16(page + at + 8 + 2 * c);
        if (off < at + 8 + 2 * cells || off >= u) {
            db->error = "a leaf cell outside its page";
            return -1;
        }
        const uint8_t *p = page + off;
        uint64_t total, rowid;
        int k = varint(p, end, &total);
        int j = k ? varint(p + k, end, &rowid) : 0;
        if (!j) {
            db->error = "a leaf cell that does not fit";
            return -1;
        }
        p += k + j;
        uint64_t n_local = total;
        if (total > max_local) {
            uint64_t rest = min_local + (total - min_local) % (u - 4);
            n_local = rest <= max_local ? rest : min_local;
        }
        if (n_local + (n_local < total ? 4 : 0) > (uint64_t)(end - p)) {
            db->error = "a leaf cell that does not fit";
            return -1;
        }
        const uint8_t *rec = p;
        if (n_local < total &&
            !(rec = assemble(db, o, p, (uint32_t)n_local, be32(p + n_local), total)))
            return -1;
        if (put_record(db, o, rec, total, (int64_t)rowid)) return -1;
    }
    return 0;
}

#define SAMPLED_LEAVES 8

/* The rows a run of leaves is likely to hold, from the cells of a few leaves across it (plus a
 * little): the columns' first size, so that they are seldom grown (a grown column may be
 * copied). 0 where a sampled page cannot be read (the scan says why). */
static size_t expect_rows(Db *db, const Pages *leaves) {
    if (!leaves->n) return 0;
    uint32_t most = 0;
    for (size_t k = 0; k < SAMPLED_LEAVES; k++) {
        uint32_t pgno = leaves->pages[leaves->n * k / SAMPLED_LEAVES];
        const uint8_t *page = page_alone(db, pgno);
        if (!page) {
            db->error = NULL;
            return 0;
        }
        uint32_t cells = be16(page + (pgno == 1 ? 100 : 0) + 3);
        if (cells > most && cells <= (db->usable - 8) / 2) most = cells; /* else: damaged */
    }
    return leaves->n * most + leaves->n * most / 64 + 64;
}

static int scan_leaves(Db *db, Out *o, const Pages *leaves) {
    for (size_t i = 0; i < leaves->n; i++) {
        uint32_t pgno = leaves->pages[i];
        if (check_page(db, pgno)) return -1; /* the caller's list: checked as read */
        if (pgno < db->win_first || pgno >= db->win_first + db->win_count) {
            /* A run of consecutive leaves in one read (nsys writes tables in order). */
            uint32_t run = 1;
            while (run < db->win_cap && i + run < leaves->n && pgno + run <= db->n_pages &&
                   leaves->pages[i + run] == pgno + run)
                run++;
            if (read_at(db, db->window, (size_t)run * db->page_size,
                        (off_t)(pgno - 1) * db->page_size))
                return -1;
            db->win_first = pgno;
            db->win_count = run;
        }
        const uint8_t *page = db->window + (size_t)(pgno - db->win_first) * db->page_size;
        if (page[pgno == 1 ? 100 : 0] != 0x0d) {
            db->error = "a leaf that changed while it was read";
            return -1;
        }
        if (put_leaf(db, o, page, pgno)) return -1;
    }
    uint8_t h[100];
    if (read_at(db, h, sizeof h, 0)) return -1;
    if (be32(h + 24) != db->counter) {
        db->error = "the file changed while it was read";
        return -1;
    }
    return 0;
}

static void free_out(Out *o) {
    for (int c = 0; c < o->ncols; c++) {
        grown_free(&o->values[c]);
        grown_free(&o->bitmap[c]);
    }
    free(o->payload);
}

/* Close the file; where the read failed (``rc``), raise its error as ValueError. */
static int closed(Db *db, int rc) {
    const char *error = db->error; /* static texts: they outlive the file */
    close_db(db);
    if (rc) PyErr_SetString(PyExc_ValueError, error ? error : "the table could not be read");
    return rc;
}

static PyObject *leaves(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *path_obj;
    unsigned long root;
    if (!PyArg_ParseTuple(args, "O&k", PyUnicode_FSConverter, &path_obj, &root)) return NULL;
    if (root < 1 || root > UINT32_MAX) {
        Py_DECREF(path_obj);
        PyErr_SetString(PyExc_ValueError, "a root page");
        return NULL;
    }
    Db db;
    Pages found = {0};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = open_db(&db, PyBytes_AS_STRING(path_obj));
    if (!rc) rc = list_leaves(&db, (uint32_t)root, &found);
    Py_END_ALLOW_THREADS
    Py_DECREF(path_obj);
    uint32_t counter = db.counter;
    PyObject *pages = rc ? NULL
                         : PyBytes_FromStringAndSize((const char *)found.pages,
                                                     (Py_ssize_t)(found.n * sizeof(uint32_t)));
    free(found.pages);
    if (closed(&db, rc) || !pages) return NULL;
    return Py_BuildValue("(kN)", (unsigned long)counter, pages);
}

static PyObject *scan(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *path_obj, *index, *letters;
    unsigned long counter;
    Py_buffer share;
    int alias;
    if (!PyArg_ParseTuple(args, "O&ky*O!O!i", PyUnicode_FSConverter, &path_obj, &counter,
                          &share, &PyTuple_Type, &index, &PyBytes_Type, &letters, &alias))
        return NULL;
    /* The leaves to read, as leaves() lists them (uint32 page numbers), copied so that the
     * caller's buffer is let go at once. */
    Pages pages = {0};
    if (share.len % (Py_ssize_t)sizeof(uint32_t) == 0 && share.len > 0) {
        pages.n = pages.cap = (size_t)share.len / sizeof(uint32_t);
        pages.pages = malloc((size_t)share.len);
        if (pages.pages) memcpy(pages.pages, share.buf, (size_t)share.len);
    }
    PyBuffer_Release(&share);
    if (share.len && !pages.pages) {
        Py_DECREF(path_obj);
        if (share.len % (Py_ssize_t)sizeof(uint32_t))
            PyErr_SetString(PyExc_ValueError, "leaves are uint32 page numbers");
        else
            PyErr_NoMemory();
        return NULL;
    }
    Out o;
    memset(&o, 0, sizeof o);
    o.ncols = (int)PyTuple_GET_SIZE(index);
    o.alias = alias;
    o.last = -1;
    for (int i = 0; i < MAX_COLUMNS; i++) o.want[i] = -1;
    const char *bad = NULL;
    if (o.ncols < 1 || o.ncols > MAX_COLUMNS || alias < -1 || alias >= o.ncols ||
        PyBytes_GET_SIZE(letters) != o.ncols)
        bad = "1 to 64 columns, a letter for each, an alias among them";
    for (int c = 0; !bad && c < o.ncols; c++) {
        o.letter[c] = PyBytes_AS_STRING(letters)[c];
        if (o.letter[c] != 'l' && o.letter[c] != 'i') bad = "letters are 'l' (int64) or 'i' (int32)";
    }
    for (int c = 0; !bad && c < o.ncols; c++) {
        long i = PyLong_AsLong(PyTuple_GET_ITEM(index, c));
        if (i < 0 || i >= MAX_COLUMNS) {
            bad = "column positions are 0 to 63";
            break;
        }
        for (int d = 0; d < c; d++)
            if (o.index[d] == i) bad = "a column position given twice";
        o.index[c] = (int)i;
        o.want[i] = c;
        if (i > o.last) o.last = (int)i;
    }
    if (bad) {
        Py_DECREF(path_obj);
        free(pages.pages);
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, bad);
        return NULL;
    }
    Db db;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = open_db(&db, PyBytes_AS_STRING(path_obj));
    if (!rc && db.counter != counter) {
        db.error = "the file changed since its leaves were listed";
        rc = -1;
    }
    if (!rc) {
        o.expect = expect_rows(&db, &pages);
        rc = scan_leaves(&db, &o, &pages);
    }
    if (!rc && !o.cap && grow(&o)) {
        db.error = "out of memory";
        rc = -1;
    }
    Py_END_ALLOW_THREADS
    Py_DECREF(path_obj);
    free(pages.pages);
    if (closed(&db, rc)) {
        free_out(&o);
        return NULL;
    }
    free(o.payload);
    o.payload = NULL;
    Py_ssize_t rows = (Py_ssize_t)o.rows;
    PyObject *columns = PyTuple_New(o.ncols);
    for (int c = 0; columns && c < o.ncols; c++) {
        /* Trimmed to the rows (shrinking keeps the data where it is; failing, it keeps all). */
        size_t bytes = (size_t)rows * width(o.letter[c]);
        grown_resize(&o.values[c], bytes);
        grown_resize(&o.bitmap[c], (size_t)(rows + 7) / 8);
        PyObject *values = owned_new(&o.values[c], (Py_ssize_t)bytes);
        PyObject *bitmap = owned_new(&o.bitmap[c], (rows + 7) / 8);
        PyObject *pair = values && bitmap ? PyTuple_Pack(2, values, bitmap) : NULL;
        Py_XDECREF(values);
        Py_XDECREF(bitmap);
        if (!pair) {
            Py_CLEAR(columns);
            break;
        }
        PyTuple_SET_ITEM(columns, c, pair);
    }
    free_out(&o);
    if (!columns) return NULL;
    return Py_BuildValue("(nN)", rows, columns);
}

static PyMethodDef METHODS[] = {
    {"leaves", leaves, METH_VARARGS,
     "leaves(path, root) -> (counter, pages): the file change counter and the leaf pages (uint32 "
     "page numbers, left to right) of the table b-tree at page ``root``: its interior pages are "
     "read, not its leaves. ValueError where the file cannot be read so."},
    {"scan", scan, METH_VARARGS,
     "scan(path, counter, pages, positions, letters, alias) -> (rows, ((values, bitmap), ...)): "
     "the integer columns at record ``positions`` of the leaves ``pages`` (a run of what "
     "leaves() gave, while the file's change counter is still ``counter``), int64 or int32 by "
     "``letters`` ('l', 'i'; beyond int32 is missing); ``alias`` is the index among them of "
     "the rowid alias, or -1. ValueError where the file cannot be read so."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {
    PyModuleDef_HEAD_INIT, "_sqlitescan",
    "Integer columns of SQLite tables, read from the file's pages.", -1, METHODS,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__sqlitescan(void) {
    if (PyType_Ready(&OwnedType) || PyType_Ready(&BatchesType)) return NULL;
    PyObject *module = PyModule_Create(&MODULE);
    if (module && PyModule_AddObjectRef(module, "Batches", (PyObject *)&BatchesType)) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
