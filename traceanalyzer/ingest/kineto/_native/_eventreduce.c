/* Reduce one decoded chunk of Kineto events to the rows of the canonical frames.
 *
 * The reference is reduce.reduce_frame (kineto/reduce.py), a handful of Polars queries. On a
 * chunk of a few thousand events those queries cost more than the decoding itself (their fixed
 * cost, and a copy of every column they filter), and they ran on one CPU after all chunks were
 * decoded. This pass runs on
 * the decoding thread, right after the chunk is decoded, and copies only the rows and columns
 * the frames take. Most text is not copied: an output text column holds the input's string
 * views and shares its data buffer (annotation names and sync types excepted, see Made).
 * Numbers follow the reference's arithmetic to the bit: float64 rounding half to even, casts
 * that give null out of range, int64 products that wrap.
 *
 * Like the decoder, it promises the reference's frames or nothing: where Unicode lowercasing
 * could change a result (a category, or a sync event's name, that is not ASCII) it returns
 * None, and the chunk goes through Polars.
 *
 * reduce(rows, args_valid, top, args) -> None | (untimed, negative, tables)
 *   top:  the decoder's columns of schema.EVENT_SCHEMA (ph, cat, name, pid, tid, ts, dur);
 *   args: its columns of schema.ARG_FIELDS, in that order;
 *   a text column is (views, data, valid), a number column (values, valid), with one validity
 *   byte per row. tables: cpu, gpu, annotations, syncs, memory, each (rows, layout, columns)
 *   with a letter of LAYOUT per column; a text column comes back as (views, bitmap, data), a
 *   number column as (values, bitmap), with Arrow validity bitmaps.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "_arrowstream.h"
#include "_ascii.h"
#include "_stringview.h"

enum { PH, CAT, NAME, PID, TID, TS, DUR, TOP_N };
enum {
    A_EXTERNAL, A_CORRELATION, A_DEVICE, A_STREAM, A_GRID, A_BLOCK, A_REGISTERS, A_SHARED,
    A_BYTES, A_DIMS, A_TYPES, A_STACK, A_ALLOCATED, A_RESERVED, A_DEVICE_ID, A_MEM_BYTES,
    A_ADDR, A_CONCRETE, A_FLOPS, ARGS_N
};

typedef struct {
    Py_buffer views, data, valid, values; /* text: views, data; numbers: values */
    PyObject *data_obj;                   /* text: the object owning data, shared by outputs */
} Column;

typedef struct {
    const char *p;
    Py_ssize_t n;
    int valid;
} Str;

/* The tables, and the per-row facts of pass 1 that pass 2 uses again: the row's tables. */
enum { T_CPU, T_GPU, T_ANNOTATIONS, T_SYNCS, T_MEMORY, N_TABLES };
enum { R_UNTIMED = 1, R_CPU = 2, R_GPU = 4, R_ANNOTATION = 8, R_SYNC = 16, R_MEMORY = 32 };

typedef struct {
    Py_ssize_t rows;
    const uint8_t *args_valid;
    Column top[TOP_N], args[ARGS_N];
    uint8_t *flags;
    int64_t *start, *end; /* start_ns, end_ns */
    uint8_t *cat_code;    /* index in CATEGORIES + 1, or 0 */
} Input;

/* The categories the reference matches after lowercasing ``cat`` (schema.CPU_CATEGORIES and
 * GPU_CATEGORIES, in their order; "runtime", "python", "memcpy" and "memset" are PyTorch 1.8's). */
static const char *const CATEGORIES[] = {
    "cpu_op", "operator", "cuda_runtime", "cuda_driver", "python_function", "runtime", /* CPU */
    "python",
    "kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset", /* GPU */
    "user_annotation", "gpu_user_annotation", "cuda_sync",
};
static size_t CATEGORY_LENGTHS[sizeof CATEGORIES / sizeof *CATEGORIES];
enum { C_FIRST_CPU = 1, C_LAST_CPU = 7, C_KERNEL = 8, C_LAST_GPU = 12, C_USER = 13,
       C_GPU_USER = 14, C_SYNC = 15, N_CATEGORIES = 15 };
static const char *const CPU_KINDS[] = {"op", "op", "runtime", "driver", "python", "runtime",
                                        "python"};
static const char *const GPU_KINDS[] = {"kernel", "memcpy", "memset", "memcpy", "memset"};
/* The numbering above is by hand: these fail the build where it and the lists part ways. */
_Static_assert(sizeof CATEGORIES / sizeof *CATEGORIES == N_CATEGORIES, "CATEGORIES");
_Static_assert(sizeof CPU_KINDS / sizeof *CPU_KINDS == C_LAST_CPU - C_FIRST_CPU + 1, "CPU_KINDS");
_Static_assert(sizeof GPU_KINDS / sizeof *GPU_KINDS == C_LAST_GPU - C_KERNEL + 1, "GPU_KINDS");
_Static_assert(C_KERNEL == C_LAST_CPU + 1 && C_USER == C_LAST_GPU + 1, "category groups");

static Str text_at(const Column *c, Py_ssize_t i) {
    Str s = {NULL, 0, ((const uint8_t *)c->valid.buf)[i] != 0};
    if (!s.valid) return s;
    int32_t n;
    s.p = view_text((const unsigned char *)c->views.buf + 16 * i, c->data.buf, &n);
    s.n = n;
    return s;
}

static inline int num_valid(const Input *in, const Column *c, Py_ssize_t i, int arg) {
    /* A field of an "args" that is null is null (as Polars' unnest gives it). */
    return ((const uint8_t *)c->valid.buf)[i] && (!arg || in->args_valid[i]);
}

static inline int64_t int_at(const Column *c, Py_ssize_t i) {
    int64_t v;
    memcpy(&v, (const char *)c->values.buf + 8 * i, 8);
    return v;
}

static inline double float_at(const Column *c, Py_ssize_t i) {
    double v;
    memcpy(&v, (const char *)c->values.buf + 8 * i, 8);
    return v;
}

static int equals(Str s, const char *lit) {
    size_t n = strlen(lit);
    return s.valid && (size_t)s.n == n && memcmp(s.p, lit, n) == 0;
}

static int lower_equals(Str s, const char *lit, size_t n) { /* s is ASCII */
    if ((size_t)s.n != n) return 0;
    for (size_t k = 0; k < n; k++) {
        unsigned char c = (unsigned char)s.p[k];
        if ((unsigned char)ascii_lower((char)c) != (unsigned char)lit[k]) return 0;
    }
    return 1;
}

/* Polars' cast of text to Int64 (strict=False): an optional sign, then ASCII digits, within
 * int64; anything else is null. */
static int parse_int(const char *p, Py_ssize_t n, int64_t *out) {
    Py_ssize_t k = 0;
    int negative = 0;
    if (n && (p[0] == '+' || p[0] == '-')) negative = p[k++] == '-';
    if (k == n) return 0;
    uint64_t v = 0, limit = negative ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (; k < n; k++) {
        unsigned d = (unsigned char)p[k] - '0';
        if (d > 9) return 0;
        /* Below INT64_MAX / 10, no digit can overflow: the division only runs near the end. */
        if (v >= 922337203685477580u && v > (limit - d) / 10) return 0;
        v = v * 10 + d;
    }
    *out = negative ? (int64_t)(0 - v) : (int64_t)v;
    return 1;
}

/* schema.STEP_PATTERN, ^ProfilerStep#([0-9]+)$: 1 and the step (0 if it overflows int64,
 * where the reference's cast gives null: *has_step says which), or 0 for no match. */
static int step_name(Str name, int64_t *step, int *has_step) {
    static const char prefix[] = "ProfilerStep#";
    Py_ssize_t n = sizeof prefix - 1;
    if (!name.valid || name.n <= n || memcmp(name.p, prefix, (size_t)n) != 0) return 0;
    for (Py_ssize_t k = n; k < name.n; k++)
        if (name.p[k] < '0' || name.p[k] > '9') return 0;
    *has_step = parse_int(name.p + n, name.n - n, step);
    return 1;
}

/* Whitespace of the regex class (?-u:\s). */
static int space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

/* One number of reduce._dims's regex at p[*k], -?[0-9]+, cast to Int64 then Int32 (strict=False):
 * returns 1 if the digits are there (advancing *k), with *ok set if the value fits. */
static int dim_number(const char *p, Py_ssize_t n, Py_ssize_t *k, int32_t *value, int *ok) {
    Py_ssize_t at = *k, first;
    if (at < n && p[at] == '-') at++;
    first = at;
    while (at < n && p[at] >= '0' && p[at] <= '9') at++;
    if (at == first) return 0;
    int64_t v;
    *ok = parse_int(p + *k, at - *k, &v) && v >= INT32_MIN && v <= INT32_MAX;
    *value = *ok ? (int32_t)v : 0;
    *k = at;
    return 1;
}

/* reduce._dims: ^\[\s*(-?[0-9]+)(?:\s*,\s*(-?[0-9]+))?(?:\s*,\s*(-?[0-9]+))? */
static void dims(Str s, int32_t out[3], int ok[3]) {
    ok[0] = ok[1] = ok[2] = 0;
    if (!s.valid || s.n < 1 || s.p[0] != '[') return;
    Py_ssize_t k = 1;
    while (k < s.n && space(s.p[k])) k++;
    if (!dim_number(s.p, s.n, &k, &out[0], &ok[0])) return;
    for (int axis = 1; axis < 3; axis++) {
        Py_ssize_t at = k;
        while (at < s.n && space(s.p[at])) at++;
        if (at >= s.n || s.p[at] != ',') return; /* the next group fails at the same place */
        at++;
        while (at < s.n && space(s.p[at])) at++;
        if (!dim_number(s.p, s.n, &at, &out[axis], &ok[axis])) return;
        k = at;
    }
}

/* Wrapping int64 arithmetic, as Polars' (release build) does. */
static inline int64_t wrap_add(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }

/* reduce._ns: floor(us) cast to Int64 (null beyond TIME_LIMIT_US) * 1000 + round((us - floor) * 1000),
 * rounding half to even as Polars' round() does. */
/* bounds.TIME_LIMIT_NS (2^62) and TIME_LIMIT_US: records beyond them are unplaceable. */
#define TIME_LIMIT_NS ((int64_t)1 << 62)
#define TIME_LIMIT_US ((double)(TIME_LIMIT_NS / 1000 - 1))

static int ns_of(double us, int64_t *out) {
    double whole = floor(us);
    if (!(fabs(whole) <= TIME_LIMIT_US)) return 0; /* null beyond the limit, as _ns */
    double fraction = (us - whole) * 1000.0;
    *out = wrap_add((int64_t)((uint64_t)(int64_t)whole * 1000u), (int64_t)nearbyint(fraction));
    return 1;
}

/* Pass 1, without the GIL: each row's start and end, its category, and the tables it goes to.
 * Returns 0, or -1 to decline. */
static int classify(Input *in, Py_ssize_t *untimed, Py_ssize_t *negative,
                    Py_ssize_t counts[N_TABLES]) {
    for (Py_ssize_t i = 0; i < in->rows; i++) {
        uint8_t flags = 0;
        const Column *ts = &in->top[TS], *dur = &in->top[DUR];
        int64_t start, dur_ns = 0;
        if (!num_valid(in, ts, i, 0) || !ns_of(float_at(ts, i), &start)) {
            in->flags[i] = R_UNTIMED;
            ++*untimed;
            continue;
        }
        if (num_valid(in, dur, i, 0)) {
            /* reduce._dur_ns: -1 (negative: zero-length, counted) when not a usable number */
            double d = nearbyint(float_at(dur, i) * 1000.0);
            dur_ns = fabs(d) < (double)TIME_LIMIT_NS ? (int64_t)d : -1;
        }
        int64_t end = start + (dur_ns < 0 ? 0 : dur_ns); /* both below 2^62: no overflow */
        if (end >= TIME_LIMIT_NS) { /* ends beyond the limit: as unplaceable as its start */
            in->flags[i] = R_UNTIMED;
            ++*untimed;
            continue;
        }
        if (dur_ns < 0) ++*negative;
        in->start[i] = start;
        in->end[i] = end;

        Str cat = text_at(&in->top[CAT], i), name = text_at(&in->top[NAME], i);
        uint8_t code = 0;
        if (cat.valid) {
            /* Unicode lowercasing: the reference's business */
            if (!ascii_only(cat.p, cat.n)) return -1;
            for (int c = 0; c < N_CATEGORIES && !code; c++)
                if (lower_equals(cat, CATEGORIES[c], CATEGORY_LENGTHS[c])) code = (uint8_t)(c + 1);
        }
        in->cat_code[i] = code;
        int x = equals(text_at(&in->top[PH], i), "X");
        int64_t step;
        int has_step = 0, is_step = step_name(name, &step, &has_step);
        if (x && code >= C_FIRST_CPU && code <= C_LAST_CPU && name.valid && !is_step)
            flags |= R_CPU;
        if (x && code >= C_KERNEL && code <= C_LAST_GPU) flags |= R_GPU;
        /* The reference keeps a "ProfilerStep#" name or an annotation category, then the rows
         * with a step number (one that fits int64) or an annotation category. */
        if (x && (has_step || code == C_USER || code == C_GPU_USER)) flags |= R_ANNOTATION;
        if (x && code == C_SYNC) {
            if (name.valid && !ascii_only(name.p, name.n)) return -1;
            flags |= R_SYNC;
        }
        if (equals(name, "[memory]")) flags |= R_MEMORY;
        in->flags[i] = flags;
        for (int t = 0; t < N_TABLES; t++)
            if (flags & (R_CPU << t)) counts[t]++;
    }
    return 0;
}

/* An output column: values (or string views), a validity bitmap, and for text the data buffer
 * the views point into. */
typedef struct {
    char *values;
    uint8_t *bitmap;
    int width; /* bytes per row: 16 text, 8 int64, 4 int32 */
} Out;

static inline void mark_valid(Out *o, Py_ssize_t row) {
    o->bitmap[row >> 3] |= (uint8_t)(1u << (row & 7));
}

/* A text column's string view (16 bytes). */
static inline void set(Out *o, Py_ssize_t row, const void *view, int valid) {
    if (valid) {
        memcpy(o->values + (size_t)row * 16, view, 16);
        mark_valid(o, row);
    }
}

static inline void set_int(Out *o, Py_ssize_t row, int64_t v, int valid) {
    if (!valid) return;
    if (o->width == 4) {
        /* The canonical Int32 columns: a value beyond int32 is null (a cast with strict=False). */
        if (v < INT32_MIN || v > INT32_MAX) return;
        int32_t narrow = (int32_t)v;
        memcpy(o->values + (size_t)row * 4, &narrow, 4);
    } else {
        memcpy(o->values + (size_t)row * 8, &v, 8);
    }
    mark_valid(o, row);
}

/* The string view of row i of a text column, copied (its data buffer is shared). */
static inline void set_view(Out *o, Py_ssize_t row, const Column *c, Py_ssize_t i, int valid) {
    set(o, row, (const char *)c->views.buf + 16 * i, valid && ((const uint8_t *)c->valid.buf)[i]);
}

/* A literal (the kinds: all fit in their view). */
static inline void set_literal(Out *o, Py_ssize_t row, const char *lit) {
    unsigned char view[16];
    view_make(view, lit, (int32_t)strlen(lit), 0);
    set(o, row, view, 1);
}

/* Row i of an int64 field of "args": null where the field or the whole "args" is. */
static inline void set_arg(Out *o, Py_ssize_t row, const Input *in, int field, Py_ssize_t i) {
    set_int(o, row, int_at(&in->args[field], i), num_valid(in, &in->args[field], i, 1));
}

/* The last short text parsed as an int: pid and tid repeat from one event to the next. */
typedef struct {
    unsigned char view[16];
    int64_t value;
    int has;
} Memo;

/* pid/tid as the reference's cast of the text to Int64 gives them. */
static int int_of_text(const Column *c, Py_ssize_t i, int64_t *v, Memo *memo) {
    Str s = text_at(c, i);
    if (!s.valid) return 0;
    const unsigned char *view = (const unsigned char *)c->views.buf + 16 * i;
    int inline_text = s.n <= VIEW_INLINE; /* all of it in its view: equal views, equal texts */
    if (inline_text && memcmp(view, memo->view, 16) == 0) {
        *v = memo->value;
        return memo->has;
    }
    int has = parse_int(s.p, s.n, v);
    if (inline_text) {
        memcpy(memo->view, view, 16);
        memo->value = *v;
        memo->has = has;
    }
    return has;
}

/* Table layouts: a letter per column (t text, l int64, i int32). */
static const char *const LAYOUT[N_TABLES] = {
    "tllltlllttttl",    /* cpu: name start end correlation kind pid tid external dims types stack
                           concrete_inputs flops */
    "ilttlllliiiiiiill", /* gpu: device stream kind name start end correlation external grid_xyz
                            block_xyz registers shared_mem bytes */
    "llttlll",          /* annotations: pid tid kind name start end step */
    "lliltlll",         /* syncs: pid tid device stream sync_type start end correlation */
    "llllllll",         /* memory: pid tid Device Id start Total Allocated Total Reserved Bytes
                            Addr */
};

/* Text made here, or copied out of the chunk: its own buffer (Made), which the annotation names
 * and sync types share. Annotations are a few rows in many chunks: sharing each chunk's buffer
 * of names would keep every chunk's names alive for the whole read (bench/NOTES.md, round 8). */
typedef struct {
    char *p;
    Py_ssize_t len;
} Made;

/* The view of text p[0:n], lowercased if asked, copied into made unless it fits inline. */
static void set_text(Out *o, Py_ssize_t row, const char *p, int32_t n, int lowercase, Made *made) {
    char short_text[VIEW_INLINE];
    char *dst = n <= VIEW_INLINE ? short_text : made->p + made->len;
    for (int32_t k = 0; k < n; k++) dst[k] = lowercase ? ascii_lower(p[k]) : p[k];
    unsigned char view[16];
    view_make(view, dst, n, (int32_t)made->len);
    if (n > VIEW_INLINE) made->len += n;
    set(o, row, view, 1);
}

/* Pass 2, without the GIL: fill the tables' columns. */
static void fill(const Input *in, Out *tables[N_TABLES], Made *made) {
    Py_ssize_t row[N_TABLES] = {0};
    const Column *a = in->args;
    Memo pids = {{0xff}, 0, 0}, tids = {{0xff}, 0, 0}; /* a view no text has: length -1 */
    for (Py_ssize_t i = 0; i < in->rows; i++) {
        uint8_t f = in->flags[i];
        if (f & R_UNTIMED || !(f & (R_CPU | R_GPU | R_ANNOTATION | R_SYNC | R_MEMORY))) continue;
        int64_t pid = 0, tid = 0;
        int has_pid = int_of_text(&in->top[PID], i, &pid, &pids);
        int has_tid = int_of_text(&in->top[TID], i, &tid, &tids);
        int64_t start = in->start[i], end = in->end[i];
        if (f & R_CPU) {
            Out *o = tables[T_CPU];
            Py_ssize_t r = row[T_CPU]++;
            Str stack = text_at(&a[A_STACK], i);
            set_view(&o[0], r, &in->top[NAME], i, 1);
            set_int(&o[1], r, start, 1);
            set_int(&o[2], r, end, 1);
            set_arg(&o[3], r, in, A_CORRELATION, i);
            set_literal(&o[4], r, CPU_KINDS[in->cat_code[i] - C_FIRST_CPU]);
            set_int(&o[5], r, pid, has_pid);
            set_int(&o[6], r, tid, has_tid);
            set_arg(&o[7], r, in, A_EXTERNAL, i);
            /* set_view checks the column's own validity; a null "args" nulls its fields. */
            set_view(&o[8], r, &a[A_DIMS], i, in->args_valid[i]);
            set_view(&o[9], r, &a[A_TYPES], i, in->args_valid[i]);
            set_view(&o[10], r, &a[A_STACK], i, in->args_valid[i] && stack.n > 0);
            set_view(&o[11], r, &a[A_CONCRETE], i, in->args_valid[i]);
            set_arg(&o[12], r, in, A_FLOPS, i);
        }
        if (f & R_GPU) {
            Out *o = tables[T_GPU];
            Py_ssize_t r = row[T_GPU]++;
            int has_device = num_valid(in, &a[A_DEVICE], i, 1);
            int has_stream = num_valid(in, &a[A_STREAM], i, 1);
            set_int(&o[0], r, has_device ? int_at(&a[A_DEVICE], i) : pid, has_device || has_pid);
            set_int(&o[1], r, has_stream ? int_at(&a[A_STREAM], i) : tid, has_stream || has_tid);
            set_literal(&o[2], r, GPU_KINDS[in->cat_code[i] - C_KERNEL]);
            set_view(&o[3], r, &in->top[NAME], i, 1);
            set_int(&o[4], r, start, 1);
            set_int(&o[5], r, end, 1);
            set_arg(&o[6], r, in, A_CORRELATION, i);
            set_arg(&o[7], r, in, A_EXTERNAL, i);
            int32_t d[3];
            int ok[3];
            Str grid = text_at(&a[A_GRID], i), block = text_at(&a[A_BLOCK], i);
            grid.valid = grid.valid && in->args_valid[i];
            block.valid = block.valid && in->args_valid[i];
            dims(grid, d, ok);
            for (int k = 0; k < 3; k++) set_int(&o[8 + k], r, d[k], ok[k]);
            dims(block, d, ok);
            for (int k = 0; k < 3; k++) set_int(&o[11 + k], r, d[k], ok[k]);
            set_arg(&o[14], r, in, A_REGISTERS, i);
            set_arg(&o[15], r, in, A_SHARED, i);
            set_arg(&o[16], r, in, A_BYTES, i);
        }
        if (f & R_ANNOTATION) {
            Out *o = tables[T_ANNOTATIONS];
            Py_ssize_t r = row[T_ANNOTATIONS]++;
            int64_t step = 0;
            int has_step = 0;
            Str name = text_at(&in->top[NAME], i);
            step_name(name, &step, &has_step);
            uint8_t code = in->cat_code[i];
            int cat_valid = ((const uint8_t *)in->top[CAT].valid.buf)[i];
            set_int(&o[0], r, pid, has_pid);
            set_int(&o[1], r, tid, has_tid);
            /* The reference's null logic: a step whose cat is null is a "user" annotation. */
            set_literal(&o[2], r, has_step && cat_valid && code != C_GPU_USER ? "step"
                                  : code == C_GPU_USER                     ? "gpu_user"
                                                                           : "user");
            if (name.valid) set_text(&o[3], r, name.p, (int32_t)name.n, 0, made);
            set_int(&o[4], r, start, 1);
            set_int(&o[5], r, end, 1);
            set_int(&o[6], r, step, has_step);
        }
        if (f & R_SYNC) {
            Out *o = tables[T_SYNCS];
            Py_ssize_t r = row[T_SYNCS]++;
            int has_device = num_valid(in, &a[A_DEVICE], i, 1);
            set_int(&o[0], r, pid, has_pid);
            set_int(&o[1], r, tid, has_tid);
            set_int(&o[2], r, has_device ? int_at(&a[A_DEVICE], i) : pid, has_device || has_pid);
            set_arg(&o[3], r, in, A_STREAM, i);
            /* "stream_wait" for a name with "wait" in any case, else its first word, lowercased
             * (ASCII: classify declined any other name). */
            Str name = text_at(&in->top[NAME], i);
            if (name.valid) {
                int wait = 0;
                for (Py_ssize_t k = 0; k + 4 <= name.n && !wait; k++)
                    wait = lower_equals((Str){name.p + k, 4, 1}, "wait", 4);
                int32_t n = 0;
                const char *word = wait ? "stream_wait" : name.p;
                if (wait) {
                    n = 11;
                } else {
                    while (n < name.n && ascii_word(word[n])) n++;
                }
                if (n > 0) set_text(&o[4], r, word, n, 1, made); /* no first word: null */
            }
            set_int(&o[5], r, start, 1);
            set_int(&o[6], r, end, 1);
            set_arg(&o[7], r, in, A_CORRELATION, i);
        }
        if (f & R_MEMORY) {
            Out *o = tables[T_MEMORY];
            Py_ssize_t r = row[T_MEMORY]++;
            set_int(&o[0], r, pid, has_pid);
            set_int(&o[1], r, tid, has_tid);
            set_arg(&o[2], r, in, A_DEVICE_ID, i);
            set_int(&o[3], r, start, 1);
            set_arg(&o[4], r, in, A_ALLOCATED, i);
            set_arg(&o[5], r, in, A_RESERVED, i);
            set_arg(&o[6], r, in, A_MEM_BYTES, i);
            set_arg(&o[7], r, in, A_ADDR, i);
        }
    }
}

/* Where each text column of a table takes its data buffer from: an input column, the buffer
 * of text made here, or NULL (literals, all inline). */
static PyObject *text_source(const Input *in, int table, int col, PyObject *made) {
    switch (table) {
    case T_CPU:
        return col == 0 ? in->top[NAME].data_obj : col == 8 ? in->args[A_DIMS].data_obj
             : col == 9 ? in->args[A_TYPES].data_obj : col == 10 ? in->args[A_STACK].data_obj
             : col == 11 ? in->args[A_CONCRETE].data_obj : NULL;
    case T_GPU:
        return col == 3 ? in->top[NAME].data_obj : NULL;
    case T_ANNOTATIONS:
        return col == 3 ? made : NULL;
    case T_SYNCS:
        return made;
    }
    return NULL;
}

static void release(Column *c) {
    if (c->views.obj) PyBuffer_Release(&c->views);
    if (c->data.obj) PyBuffer_Release(&c->data);
    if (c->valid.obj) PyBuffer_Release(&c->valid);
    if (c->values.obj) PyBuffer_Release(&c->values);
}

/* Take one input column, checking every buffer's size: a wrong one is a caller's bug, and
 * must be an exception, not a read out of bounds. */
static int load_column(PyObject *spec, Column *c, Py_ssize_t rows, int text) {
    memset(c, 0, sizeof *c);
    if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) != (text ? 3 : 2)) {
        PyErr_SetString(PyExc_ValueError, "a column is (views, data, valid) or (values, valid)");
        return -1;
    }
    if (text) {
        c->data_obj = PyTuple_GET_ITEM(spec, 1);
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(spec, 0), &c->views, PyBUF_SIMPLE) ||
            PyObject_GetBuffer(c->data_obj, &c->data, PyBUF_SIMPLE) ||
            PyObject_GetBuffer(PyTuple_GET_ITEM(spec, 2), &c->valid, PyBUF_SIMPLE))
            return -1;
        if (c->views.len != 16 * rows || c->valid.len != rows ||
            !views_within(c->views.buf, rows, c->data.len))
            goto bad;
        return 0;
    }
    if (PyObject_GetBuffer(PyTuple_GET_ITEM(spec, 0), &c->values, PyBUF_SIMPLE) ||
        PyObject_GetBuffer(PyTuple_GET_ITEM(spec, 1), &c->valid, PyBUF_SIMPLE))
        return -1;
    if (c->values.len != 8 * rows || c->valid.len != rows) goto bad;
    return 0;
bad:
    PyErr_SetString(PyExc_ValueError, "a column's buffers do not hold the given rows");
    return -1;
}

static PyObject *bytes_of(Py_ssize_t n, int zero) {
    PyObject *b = PyBytes_FromStringAndSize(NULL, n);
    if (b && zero) memset(PyBytes_AS_STRING(b), 0, (size_t)n);
    return b;
}

static PyObject *reduce(PyObject *self, PyObject *py_args) {
    (void)self;
    Py_ssize_t rows;
    Py_buffer args_valid = {0};
    PyObject *top, *args, *result = NULL, *made_data = NULL;
    if (!PyArg_ParseTuple(py_args, "ny*O!O!", &rows, &args_valid, &PyTuple_Type, &top,
                          &PyTuple_Type, &args))
        return NULL;
    Input in = {0};
    in.rows = rows;
    in.args_valid = args_valid.buf;
    PyObject *tables[N_TABLES] = {0};
    Out outs[N_TABLES][17];
    Out *out_of[N_TABLES];
    int loaded_top = 0, loaded_args = 0;
    if (rows < 0 || args_valid.len != rows || PyTuple_GET_SIZE(top) != TOP_N ||
        PyTuple_GET_SIZE(args) != ARGS_N) {
        PyErr_SetString(PyExc_ValueError, "reduce() takes kineto's EVENT_SCHEMA columns");
        goto done;
    }
    for (; loaded_top < TOP_N; loaded_top++)
        if (load_column(PyTuple_GET_ITEM(top, loaded_top), &in.top[loaded_top], rows,
                        loaded_top <= TID)) {
            loaded_top++;
            goto done;
        }
    static const char ARG_TEXT[ARGS_N] = {[A_GRID] = 1, [A_BLOCK] = 1, [A_DIMS] = 1,
                                          [A_TYPES] = 1, [A_STACK] = 1,
                                          [A_CONCRETE] = 1};
    for (; loaded_args < ARGS_N; loaded_args++)
        if (load_column(PyTuple_GET_ITEM(args, loaded_args), &in.args[loaded_args], rows,
                        ARG_TEXT[loaded_args])) {
            loaded_args++;
            goto done;
        }

    in.flags = PyMem_RawMalloc((size_t)rows * 2 + 1); /* flags, then cat_code */
    in.start = PyMem_RawMalloc((size_t)rows * 8 + 8);
    in.end = PyMem_RawMalloc((size_t)rows * 8 + 8);
    if (!in.flags || !in.start || !in.end) {
        PyErr_NoMemory();
        goto done;
    }
    in.cat_code = in.flags + rows;
    /* Annotation names and sync types get a buffer of their own, as long as the names they
     * come from (a handful of events: not trimmed). */
    Py_ssize_t untimed = 0, negative = 0, counts[N_TABLES] = {0}, made_bytes = 0;
    Made made = {NULL, 0};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = classify(&in, &untimed, &negative, counts);
    Py_END_ALLOW_THREADS
    if (rc) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    for (Py_ssize_t i = 0; i < rows; i++)
        if (in.flags[i] & (R_SYNC | R_ANNOTATION)) made_bytes += text_at(&in.top[NAME], i).n;
    if (!(made_data = bytes_of(made_bytes, 0))) goto done;
    made.p = PyBytes_AS_STRING(made_data);

    for (int t = 0; t < N_TABLES; t++) {
        const char *layout = LAYOUT[t];
        Py_ssize_t ncols = (Py_ssize_t)strlen(layout), n = counts[t];
        PyObject *cols = PyTuple_New(ncols);
        if (!cols || !(tables[t] = Py_BuildValue("(nsN)", n, layout, cols))) goto done;
        out_of[t] = outs[t];
        for (Py_ssize_t c = 0; c < ncols; c++) {
            int width = width_of(layout[c]);
            PyObject *values = bytes_of(n * width, layout[c] == 't');
            PyObject *bitmap = bytes_of((n + 7) / 8, 1);
            PyObject *col = NULL;
            if (values && bitmap) {
                outs[t][c] = (Out){PyBytes_AS_STRING(values), (uint8_t *)PyBytes_AS_STRING(bitmap),
                                   width};
                if (layout[c] == 't') {
                    PyObject *data = text_source(&in, t, (int)c, made_data);
                    col = Py_BuildValue("(NNO)", values, bitmap, data ? data : Py_None);
                } else {
                    col = Py_BuildValue("(NN)", values, bitmap);
                }
            } else {
                Py_XDECREF(values);
                Py_XDECREF(bitmap);
            }
            if (!col) goto done;
            PyTuple_SET_ITEM(cols, c, col);
        }
    }
    Py_BEGIN_ALLOW_THREADS
    fill(&in, out_of, &made);
    Py_END_ALLOW_THREADS
    result = Py_BuildValue("(nn(OOOOO))", untimed, negative, tables[0], tables[1], tables[2],
                           tables[3], tables[4]);
done:
    for (int t = 0; t < N_TABLES; t++) Py_XDECREF(tables[t]);
    Py_XDECREF(made_data);
    for (int c = 0; c < loaded_top; c++) release(&in.top[c]);
    for (int c = 0; c < loaded_args; c++) release(&in.args[c]);
    PyMem_RawFree(in.flags);
    PyMem_RawFree(in.start);
    PyMem_RawFree(in.end);
    PyBuffer_Release(&args_valid);
    return result;
}

static PyMethodDef METHODS[] = {
    {"reduce", reduce, METH_VARARGS, "Rows of the canonical frames from a decoded chunk, or None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_eventreduce", NULL, -1, METHODS,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__eventreduce(void) {
    for (int c = 0; c < N_CATEGORIES; c++) CATEGORY_LENGTHS[c] = strlen(CATEGORIES[c]);
    if (PyType_Ready(&BatchesType)) return NULL;
    PyObject *module = PyModule_Create(&MODULE);
    if (module && PyModule_AddObjectRef(module, "Batches", (PyObject *)&BatchesType)) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
