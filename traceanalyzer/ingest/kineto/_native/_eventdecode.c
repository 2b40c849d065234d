/* Kineto event decoder: trace events straight into typed columns.
 *
 * Polars' NDJSON reader is the reference (traceanalyzer/ingest/kineto/reader.py falls back to
 * it). It tokenizes every value of every event; this decoder validates the same JSON but only
 * converts the fields asked for, at a fraction of the CPU (bench/NOTES.md, round 4).
 *
 * Input: complete event objects one after another, either one per line (NDJSON) or as the
 * trace's array holds them (a comma and any whitespace between two events), so a run of events
 * can be decoded where it lies in the file, with no NDJSON rewrite.
 *
 * The contract is "the events Polars would read, or nothing": whatever this decoder is not sure
 * to read exactly as Polars does (escapes in keys, floats or objects inside a text field,
 * duplicate keys, invalid JSON or UTF-8, integers of 20 digits, ...) makes decode() return None,
 * and the caller decodes that piece another way. Real traces almost never hit that.
 *
 * decode(chunk, top_fields, args_key, arg_fields[, keep_index, keep_values, arena_bytes,
 *        text_chars])
 *     -> None | (rows, args_valid, top_cols, arg_cols)
 *   *_fields: tuple of (key: bytes, kind: int), kind K_TEXT, K_INT (int64) or K_FLOAT (float64)
 *   of _columncodes.h (ColumnKind in Python)
 *   keep_index, keep_values: only events whose top-level text field keep_index has one of these
 *   values (a tuple of bytes) become rows, as a Polars is_in filter would keep them
 *   arena_bytes: if not 0, the columns grow in one mapping of that size in huge pages
 *   (_hugearena.h) while they fit: a fresh process then takes a fault per 2 MB, not per 4 KB.
 *   The mapping lives until the last of its columns goes, so it is for the first chunks a
 *   process decodes; the memory of later ones is what earlier chunks freed, faulted in already.
 *   text_chars: if not 0, each text field keeps at most its first text_chars characters (the
 *   rest is validated and skipped, never written): traceanalyzer passes the text cap plus one
 *   (ingest/textcap.py), so a 150 MB name costs 64 KiB, and cap_text still sees it is long and
 *   cuts it exactly as it would have cut the whole text.
 *   a text column is (views, data, valid): Arrow string views (16 bytes a row; up to 12 bytes
 *   of text inline, longer text in data), which Polars takes without a copy; a number column
 *   is (values, valid). valid holds one byte per row. Every buffer is an object that owns the
 *   decoder's memory and exposes it through the buffer protocol (no copy).
 *
 * What Polars does with ignore_errors, and so this decoder: a text field holding a number,
 * boolean or list gets that value as JSON text with ", " separators; a number field holding
 * another type is null (int64 takes only integers within int64; float64 takes integers too);
 * "args" missing or not an object is a null struct.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "_columncodes.h"
#include "_hugearena.h"
#include "_stringview.h"

enum { OK = 0, BAIL = -1, NOMEM = -2 };
#define MAX_FIELDS 64
#define MAX_DEPTH 64

typedef struct {
    char *p;
    size_t len, cap;
    int in_arena; /* p lies in this thread's arena (not malloc's) */
} Buf;

/* The arena the chunk being decoded on this thread grows its columns in, if any. */
static _Thread_local struct {
    char *base;
    size_t size, used;
} arena;

/* Room for cap bytes in the arena: b's block grown in place when it is the arena's last one, a
 * new block otherwise (b's bytes copied there). 0 if it does not fit. */
static int arena_grow(Buf *b, size_t cap) {
    size_t have = b->in_arena ? arena_round(b->cap) : 0, need = arena_round(cap);
    if (have && b->p + have == arena.base + arena.used && arena.used - have + need <= arena.size) {
        arena.used += need - have;
        b->cap = cap;
        return 1;
    }
    if (arena.used + need > arena.size) return 0;
    char *p = arena.base + arena.used;
    arena.used += need;
    if (b->len) memcpy(p, b->p, b->len);
    if (!b->in_arena) free(b->p);
    b->p = p;
    b->cap = cap;
    b->in_arena = 1;
    return 1;
}

/* The chunk being decoded on this thread, and where its current event starts: a buffer grows
 * to what the whole chunk will need at the rate seen so far. Doubling from 4 KB copied each
 * buffer a dozen times, and in a fresh process every copy faulted in pages it then left. */
static _Thread_local struct {
    const unsigned char *start, *at, *end;
} progress;

static int buf_grow(Buf *b, size_t extra) {
    size_t cap = b->cap ? b->cap * 2 : 1 << 12;
    size_t done = (size_t)(progress.at - progress.start);
    if (b->len && done >= 1 << 16) { /* enough events to project from */
        double whole = (double)(progress.end - progress.start) / (double)done;
        size_t projected = (size_t)((double)b->len * whole * 1.125);
        if (projected > cap) cap = projected;
    }
    while (cap < b->len + extra) cap *= 2;
    if (arena.base && arena_grow(b, cap)) return OK;
    char *p = b->in_arena ? malloc(cap) : realloc(b->p, cap);
    if (!p) return NOMEM;
    if (b->in_arena && b->len) memcpy(p, b->p, b->len); /* out of a full arena */
    b->p = p;
    b->cap = cap;
    b->in_arena = 0;
    return OK;
}

static inline int buf_put(Buf *b, const void *src, size_t n) {
    if (!n) return OK; /* memcpy from or to NULL is undefined even for no bytes */
    if (b->len + n > b->cap && buf_grow(b, n)) return NOMEM;
    memcpy(b->p + b->len, src, n);
    b->len += n;
    return OK;
}

typedef struct {
    const char *key;
    size_t keylen;
    int kind;
    int seen; /* set in the current row */
    Buf values, views, valid; /* values: numbers, or the data of long texts */
} Field;

#define SLOTS 128 /* open-addressing hash of the keys: an event has ~20 keys to look up */
typedef struct {
    Field f[MAX_FIELDS];
    int n;
    signed char slot[SLOTS];
} Table;

static inline unsigned key_hash(const unsigned char *a, size_t n) {
    return n ? (unsigned)(n * 31 + a[0] * 7 + a[n - 1]) % SLOTS : 0;
}

typedef const unsigned char *Ptr;

/* Byte classes inside a string: 0 plain ASCII, 1 quote or backslash, 2 control, 3 non-ASCII. */
static unsigned char STR_CLASS[256];

static void init_tables(void) {
    for (int c = 0; c < 256; c++) STR_CLASS[c] = c < 0x20 ? 2 : (c >= 0x80 ? 3 : 0);
    STR_CLASS['"'] = 1;
    STR_CLASS['\\'] = 1;
}

static inline Ptr skip_ws(Ptr s, Ptr e) {
    while (s < e && (*s == ' ' || *s == '\n' || *s == '\r' || *s == '\t')) s++;
    return s;
}

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int read_hex4(Ptr s, Ptr e, unsigned *out) {
    if (e - s < 4) return BAIL;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(s[i]);
        if (h < 0) return BAIL;
        v = v << 4 | (unsigned)h;
    }
    *out = v;
    return OK;
}

/* Length of the valid UTF-8 sequence at s (no overlongs, no surrogates, <= U+10FFFF), or 0. */
static int utf8_len(Ptr s, Ptr e) {
    unsigned c = s[0];
    int n;
    unsigned min;
    if (c >= 0xC2 && c <= 0xDF) n = 2, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF) n = 3, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4) n = 4, min = 0x10000;
    else return 0;
    if (e - s < n) return 0;
    unsigned cp = c & (0x3F >> (n - 1));
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return n;
}

/* Scan the string starting at the quote *s; on success *s is past the closing quote and
 * [*start, *stop) is the raw content. */
static int scan_string(Ptr *ps, Ptr e, Ptr *start, Ptr *stop, int *escaped) {
    Ptr s = *ps + 1;
    *start = s;
    *escaped = 0;
    for (;;) {
        while (s < e && STR_CLASS[*s] == 0) s++;
        if (s >= e) return BAIL;
        unsigned c = *s;
        if (c == '"') break;
        if (c == '\\') {
            *escaped = 1;
            if (s + 1 >= e) return BAIL;
            unsigned x = s[1];
            if (x == 'u') {
                unsigned v;
                if (read_hex4(s + 2, e, &v)) return BAIL;
                s += 6;
            } else if (x == '"' || x == '\\' || x == '/' || x == 'b' || x == 'f' || x == 'n' ||
                       x == 'r' || x == 't') {
                s += 2;
            } else {
                return BAIL;
            }
        } else if (c < 0x20) {
            return BAIL; /* raw control characters are not JSON */
        } else {
            int n = utf8_len(s, e);
            if (!n) return BAIL;
            s += n;
        }
    }
    *stop = s;
    *ps = s + 1;
    return OK;
}

static int put_utf8(Buf *b, unsigned cp) {
    unsigned char out[4];
    size_t n;
    if (cp < 0x80) out[0] = (unsigned char)cp, n = 1;
    else if (cp < 0x800) out[0] = 0xC0 | cp >> 6, out[1] = 0x80 | (cp & 0x3F), n = 2;
    else if (cp < 0x10000)
        out[0] = 0xE0 | cp >> 12, out[1] = 0x80 | ((cp >> 6) & 0x3F), out[2] = 0x80 | (cp & 0x3F),
        n = 3;
    else
        out[0] = 0xF0 | cp >> 18, out[1] = 0x80 | ((cp >> 12) & 0x3F),
        out[2] = 0x80 | ((cp >> 6) & 0x3F), out[3] = 0x80 | (cp & 0x3F), n = 4;
    return buf_put(b, out, n);
}

/* Characters of one text field at most (0: no limit), set per call: see text_chars in decode. */
static _Thread_local size_t text_chars;

/* Bytes of the first `chars` characters of the valid UTF-8 in [s, s + n) (n if it has fewer). */
static size_t prefix_bytes(Ptr s, size_t n, size_t chars) {
    if (n <= chars) return n; /* bytes are at least characters */
    size_t i = 0;
    for (; i < n; i++)
        if ((s[i] & 0xC0) != 0x80 && chars-- == 0) break;
    return i;
}

/* The decoded text of a scanned string (escapes already validated by scan_string), up to
 * `left` characters (0: all of it). */
static int unescape(Buf *b, Ptr s, Ptr e, size_t left) {
    int capped = left != 0;
    while (s < e) {
        Ptr run = s;
        while (s < e && *s != '\\') s++;
        if (s > run) {
            size_t n = (size_t)(s - run), keep = n;
            if (capped) {
                keep = prefix_bytes(run, n, left);
                size_t chars = 0;
                for (size_t i = 0; i < keep; i++) chars += (run[i] & 0xC0) != 0x80;
                left -= chars;
            }
            if (buf_put(b, run, keep)) return NOMEM;
            if (capped && keep < n) return OK;
        }
        if (s >= e) break;
        if (capped && left == 0) return OK;
        if (capped) left--;
        unsigned x = s[1];
        if (x != 'u') {
            char c = x == 'b' ? '\b' : x == 'f' ? '\f' : x == 'n' ? '\n' : x == 'r' ? '\r'
                   : x == 't' ? '\t' : (char)x;
            if (buf_put(b, &c, 1)) return NOMEM;
            s += 2;
            continue;
        }
        unsigned cp;
        read_hex4(s + 2, e, &cp);
        s += 6;
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            unsigned lo;
            if (e - s < 6 || s[0] != '\\' || s[1] != 'u' || read_hex4(s + 2, e, &lo) ||
                lo < 0xDC00 || lo > 0xDFFF)
                return BAIL;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            s += 6;
        } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            return BAIL;
        }
        int rc = put_utf8(b, cp);
        if (rc) return rc;
    }
    return OK;
}

typedef struct {
    Ptr start, stop;
    int is_int;
    int int_ok; /* is_int and within int64 */
    int64_t value;
} Number;

static inline int is_delim(Ptr s, Ptr e) {
    return s >= e || *s == ',' || *s == '}' || *s == ']' || *s == ' ' || *s == '\t' ||
           *s == '\r' || *s == '\n';
}

/* Validate a JSON number at *ps (the grammar, and that it is finite) and read integers. */
static int scan_number(Ptr *ps, Ptr e, Number *num) {
    Ptr s = *ps;
    num->start = s;
    int neg = 0;
    if (s < e && *s == '-') neg = 1, s++;
    if (s >= e) return BAIL;
    Ptr digits = s;
    if (*s == '0') s++;
    else if (*s >= '1' && *s <= '9')
        while (s < e && *s >= '0' && *s <= '9') s++;
    else return BAIL;
    size_t ndigits = (size_t)(s - digits);
    int has_frac = 0, has_exp = 0;
    if (s < e && *s == '.') {
        has_frac = 1;
        s++;
        Ptr f = s;
        while (s < e && *s >= '0' && *s <= '9') s++;
        if (s == f) return BAIL;
    }
    if (s < e && (*s == 'e' || *s == 'E')) {
        has_exp = 1;
        s++;
        if (s < e && (*s == '+' || *s == '-')) s++;
        Ptr x = s;
        while (s < e && *s >= '0' && *s <= '9') s++;
        if (s == x) return BAIL;
    }
    if (!is_delim(s, e)) return BAIL;
    num->stop = s;
    num->is_int = !has_frac && !has_exp;
    num->int_ok = 0;
    if (num->is_int) {
        if (ndigits >= 20) return BAIL; /* how Polars reads these varies (u64, float, error) */
        uint64_t v = 0;
        for (Ptr d = digits; d < s; d++) v = v * 10 + (uint64_t)(*d - '0');
        if (!neg && v <= (uint64_t)INT64_MAX) num->value = (int64_t)v, num->int_ok = 1;
        else if (neg && v <= (uint64_t)INT64_MAX + 1) num->value = (int64_t)(0 - v), num->int_ok = 1;
    } else if (has_exp || s - num->start > 300) {
        char tmp[512];
        size_t n = (size_t)(s - num->start);
        if (n >= sizeof tmp) return BAIL;
        memcpy(tmp, num->start, n);
        tmp[n] = 0;
        if (isinf(strtod(tmp, NULL))) return BAIL; /* Polars rejects numbers beyond float64 */
    }
    *ps = s;
    return OK;
}

static double number_as_double(const Number *num) {
    if (num->int_ok) return (double)num->value;
    char tmp[512]; /* scan_number declined tokens this long */
    size_t n = (size_t)(num->stop - num->start);
    memcpy(tmp, num->start, n);
    tmp[n] = 0;
    return strtod(tmp, NULL); /* correctly rounded, as Polars' parser */
}

static int match_literal(Ptr *ps, Ptr e, const char *lit, size_t n) {
    if ((size_t)(e - *ps) < n || memcmp(*ps, lit, n) || !is_delim(*ps + n, e)) return BAIL;
    *ps += n;
    return OK;
}

/* Validate any JSON value at *ps; with out != NULL also write it as Polars writes JSON text
 * (lists and scalars; an object there is declined). */
static int value(Ptr *ps, Ptr e, Buf *out, int depth) {
    Ptr s = *ps;
    if (s >= e) return BAIL;
    int rc;
    switch (*s) {
    case '"': {
        Ptr a, b;
        int escaped;
        if (scan_string(&s, e, &a, &b, &escaped)) return BAIL;
        if (out) {
            if (escaped) return BAIL; /* Polars re-escapes these its own way */
            if ((rc = buf_put(out, a - 1, (size_t)(b - a) + 2))) return rc;
        }
        break;
    }
    case '[':
    case '{': {
        int obj = *s == '{';
        char close = obj ? '}' : ']';
        if (depth >= MAX_DEPTH) return BAIL;
        if (obj && out) return BAIL; /* objects in text fields: Polars' key order is unclear */
        if (out && (rc = buf_put(out, s, 1))) return rc;
        s = skip_ws(s + 1, e);
        if (s < e && *s == close) {
            s++;
        } else {
            for (int first = 1;; first = 0) {
                if (out && !first && (rc = buf_put(out, ", ", 2))) return rc;
                if (obj) { /* only validated: out is NULL here */
                    if (s >= e || *s != '"') return BAIL;
                    if ((rc = value(&s, e, NULL, depth + 1))) return rc;
                    s = skip_ws(s, e);
                    if (s >= e || *s != ':') return BAIL;
                    s = skip_ws(s + 1, e);
                }
                if ((rc = value(&s, e, out, depth + 1))) return rc;
                s = skip_ws(s, e);
                if (s < e && *s == ',') {
                    s = skip_ws(s + 1, e);
                    continue;
                }
                if (s < e && *s == close) {
                    s++;
                    break;
                }
                return BAIL;
            }
        }
        if (out && (rc = buf_put(out, &close, 1))) return rc;
        break;
    }
    case 't':
        if (match_literal(&s, e, "true", 4)) return BAIL;
        if (out && (rc = buf_put(out, "true", 4))) return rc;
        break;
    case 'f':
        if (match_literal(&s, e, "false", 5)) return BAIL;
        if (out && (rc = buf_put(out, "false", 5))) return rc;
        break;
    case 'n':
        if (match_literal(&s, e, "null", 4)) return BAIL;
        if (out && (rc = buf_put(out, "null", 4))) return rc;
        break;
    default: {
        Number num;
        if (scan_number(&s, e, &num)) return BAIL;
        if (out) {
            /* Polars prints floats in its own shortest form, and -0 as 0; other integers as written */
            if (!num.int_ok || (num.value == 0 && *num.start == '-')) return BAIL;
            if ((rc = buf_put(out, num.start, (size_t)(num.stop - num.start)))) return rc;
        }
    }
    }
    *ps = s;
    return OK;
}

static int put_null(Field *f) {
    static const char zero[16] = {0};
    char no = 0;
    int rc = buf_put(&f->valid, &no, 1);
    if (rc) return rc;
    if (f->kind == K_TEXT) return buf_put(&f->views, zero, 16);
    return buf_put(&f->values, zero, 8);
}

/* The string view of the text just written at values[start:]; a short one is taken back out
 * of the data, since its view holds it. */
static int put_view(Field *f, size_t start) {
    size_t n = f->values.len - start;
    unsigned char view[16];
    if (n > INT32_MAX || start > INT32_MAX) return BAIL;
    view_make(view, f->values.p ? f->values.p + start : "", (int32_t)n, (int32_t)start);
    if (n <= VIEW_INLINE) f->values.len = start;
    return buf_put(&f->views, view, 16);
}

/* The text of the last row's view in field f. */
static const char *last_text(const Field *f, size_t *n) {
    int32_t len;
    const char *text = view_text((const unsigned char *)f->views.p + f->views.len - 16,
                                 f->values.p, &len);
    *n = (size_t)len;
    return text;
}

/* Read the value at *ps into field f (one row). As Polars with ignore_errors: a number field
 * holding another JSON type is null (an int64 field takes only integers within int64). */
static int field_value(Ptr *ps, Ptr e, Field *f) {
    Ptr s = *ps;
    int rc;
    char yes = 1;
    if (f->kind == K_TEXT) {
        size_t start = f->values.len;
        if (*s == 'n') {
            if ((rc = match_literal(&s, e, "null", 4))) return rc;
            *ps = s;
            return put_null(f);
        }
        if (*s == '"') {
            Ptr a, b;
            int escaped;
            if (scan_string(&s, e, &a, &b, &escaped)) return BAIL;
            if (escaped) rc = unescape(&f->values, a, b, text_chars);
            else if (text_chars) rc = buf_put(&f->values, a, prefix_bytes(a, (size_t)(b - a), text_chars));
            else rc = buf_put(&f->values, a, (size_t)(b - a));
            if (rc) return rc;
        } else if ((rc = value(&s, e, &f->values, 0))) {
            return rc;
        } else if (text_chars) { /* a list or number as JSON text: cut the same way */
            f->values.len = start + prefix_bytes((Ptr)f->values.p + start, f->values.len - start,
                                                 text_chars);
        }
        if ((rc = put_view(f, start))) return rc;
    } else {
        Number num;
        int numeric = *s == '-' || (*s >= '0' && *s <= '9');
        if (!numeric || scan_number(&s, e, &num) || (f->kind == K_INT && !num.int_ok)) {
            s = *ps;
            if ((rc = value(&s, e, NULL, 1))) return rc;
            *ps = s;
            return put_null(f);
        }
        if (f->kind == K_INT) {
            rc = buf_put(&f->values, &num.value, 8);
        } else {
            double d = number_as_double(&num);
            rc = buf_put(&f->values, &d, 8);
        }
        if (rc) return rc;
    }
    if ((rc = buf_put(&f->valid, &yes, 1))) return rc;
    *ps = s;
    return OK;
}

static inline Field *lookup(Table *t, Ptr key, size_t n) {
    for (unsigned h = key_hash(key, n); t->slot[h] >= 0; h = (h + 1) % SLOTS) {
        Field *f = &t->f[t->slot[h]];
        if (f->keylen == n && !memcmp(f->key, key, n)) return f;
    }
    return NULL;
}

#define MAX_KEEP 16
/* The fields of one event: the top-level keys asked for, and those of its "args" object; and
 * the values of one top-level text field (the phase) that keep an event, if any. */
typedef struct {
    Table top, args;
    const char *args_key;
    size_t args_len;
    Field *keep_field;
    const char *keep[MAX_KEEP];
    size_t keep_len[MAX_KEEP];
    int n_keep;
} Spec;

typedef struct {
    size_t values, views, valid;
} Mark;

static void mark(const Table *t, Mark *m) {
    for (int i = 0; i < t->n; i++)
        m[i] = (Mark){t->f[i].values.len, t->f[i].views.len, t->f[i].valid.len};
}

static void rollback(Table *t, const Mark *m) {
    for (int i = 0; i < t->n; i++) {
        t->f[i].values.len = m[i].values;
        t->f[i].views.len = m[i].views;
        t->f[i].valid.len = m[i].valid;
    }
}

/* Whether the event just read has a kept value in spec->keep_field (null is not kept). */
static int kept(const Spec *spec) {
    const Field *f = spec->keep_field;
    if (!f) return 1;
    if (!f->valid.p[f->valid.len - 1]) return 0;
    size_t n;
    const char *text = last_text(f, &n);
    for (int i = 0; i < spec->n_keep; i++)
        if (spec->keep_len[i] == n && !memcmp(spec->keep[i], text, n)) return 1;
    return 0;
}

static int object(Ptr *ps, Ptr e, Table *t, Spec *spec, int *args_present);

static int args_value(Ptr *ps, Ptr e, Spec *spec, int *args_present) {
    if (*args_present) return BAIL; /* a duplicate "args" */
    *args_present = 1;
    if (**ps == '{') {
        *args_present = 2;
        return object(ps, e, &spec->args, NULL, NULL);
    }
    return value(ps, e, NULL, 1); /* anything else: a null struct, as in Polars */
}

/* One object whose known keys fill the fields of t; with spec, "args" fills spec->args
 * (*args_present: 0 no "args", 1 not an object, 2 an object). */
static int object(Ptr *ps, Ptr e, Table *t, Spec *spec, int *args_present) {
    Ptr s = skip_ws(*ps + 1, e);
    int rc;
    for (int i = 0; i < t->n; i++) t->f[i].seen = 0;
    if (s < e && *s == '}') goto close;
    for (;;) {
        if (s >= e || *s != '"') return BAIL;
        Ptr a, b;
        int escaped;
        if (scan_string(&s, e, &a, &b, &escaped) || escaped) return BAIL;
        s = skip_ws(s, e);
        if (s >= e || *s != ':') return BAIL;
        s = skip_ws(s + 1, e);
        size_t n = (size_t)(b - a);
        Field *f = lookup(t, a, n);
        if (f) {
            if (f->seen) return BAIL; /* a duplicate key */
            f->seen = 1;
            rc = field_value(&s, e, f);
        } else if (spec && n == spec->args_len && !memcmp(a, spec->args_key, n)) {
            rc = args_value(&s, e, spec, args_present);
        } else {
            rc = value(&s, e, NULL, 1);
        }
        if (rc) return rc;
        s = skip_ws(s, e);
        if (s < e && *s == ',') {
            s = skip_ws(s + 1, e);
            continue;
        }
        if (s < e && *s == '}') break;
        return BAIL;
    }
close:
    for (int i = 0; i < t->n; i++)
        if (!t->f[i].seen && (rc = put_null(&t->f[i]))) return rc;
    *ps = s + 1;
    return OK;
}

/* Events one after another: one per line (NDJSON), or as in the file's array, separated by a
 * comma and whitespace. Either way each event is a complete object. */
static int decode_events(Ptr s, Ptr e, Spec *spec, Buf *args_valid, Py_ssize_t *rows) {
    int rc;
    Mark top_mark[MAX_FIELDS], args_mark[MAX_FIELDS];
    progress.start = progress.at = s;
    progress.end = e;
    for (s = skip_ws(s, e); s < e;) {
        if (*s != '{') return BAIL;
        progress.at = s;
        if (spec->keep_field) {
            mark(&spec->top, top_mark);
            mark(&spec->args, args_mark);
        }
        int present = 0;
        if ((rc = object(&s, e, &spec->top, spec, &present))) return rc;
        if (present != 2)
            for (int i = 0; i < spec->args.n; i++)
                if ((rc = put_null(&spec->args.f[i]))) return rc;
        if (kept(spec)) {
            char flag = present == 2;
            if ((rc = buf_put(args_valid, &flag, 1))) return rc;
            (*rows)++;
        } else {
            rollback(&spec->top, top_mark);
            rollback(&spec->args, args_mark);
        }
        s = skip_ws(s, e);
        if (s < e && *s == ',') s = skip_ws(s + 1, e);
    }
    return OK;
}

static int load_table(PyObject *spec, Table *t) {
    PyObject *seq = PySequence_Fast(spec, "fields must be a sequence");
    if (!seq) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > MAX_FIELDS) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_ValueError, "too many fields");
        return -1;
    }
    t->n = 0;
    memset(t->slot, -1, sizeof t->slot);
    for (Py_ssize_t i = 0; i < n; i++) {
        char *key;
        Py_ssize_t keylen;
        int kind;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "y#i", &key, &keylen, &kind)) {
            Py_DECREF(seq);
            return -1;
        }
        Field *f = &t->f[t->n++];
        memset(f, 0, sizeof *f);
        f->key = key; /* borrowed: the spec outlives the call */
        f->keylen = (size_t)keylen;
        f->kind = kind;
        unsigned h = key_hash((const unsigned char *)key, f->keylen);
        while (t->slot[h] >= 0) h = (h + 1) % SLOTS;
        t->slot[h] = (signed char)(t->n - 1);
    }
    Py_DECREF(seq);
    return 0;
}

/* The kept values of the text field at keep_index (-1: keep every event). */
static int load_keep(Spec *spec, Py_ssize_t keep_index, PyObject *keep) {
    if (keep_index < 0) return 0;
    if (keep_index >= spec->top.n || spec->top.f[keep_index].kind != K_TEXT || !keep ||
        !PyTuple_Check(keep) || PyTuple_GET_SIZE(keep) > MAX_KEEP) {
        PyErr_SetString(PyExc_ValueError, "keep: a text field's index and a tuple of bytes");
        return -1;
    }
    spec->keep_field = &spec->top.f[keep_index];
    spec->n_keep = (int)PyTuple_GET_SIZE(keep);
    for (int i = 0; i < spec->n_keep; i++) {
        char *value;
        Py_ssize_t n;
        if (PyBytes_AsStringAndSize(PyTuple_GET_ITEM(keep, i), &value, &n)) return -1;
        spec->keep[i] = value;
        spec->keep_len[i] = (size_t)n;
    }
    return 0;
}

static void buf_free(Buf *b) {
    if (!b->in_arena) free(b->p);
    b->p = NULL;
}

static void free_table(Table *t) {
    for (int i = 0; i < t->n; i++) {
        buf_free(&t->f[i].values);
        buf_free(&t->f[i].views);
        buf_free(&t->f[i].valid);
    }
}

/* A decoded buffer handed to Python as it is, not copied into bytes: the copy cost a pass over
 * every output byte, and in a fresh process the page faults of a second buffer as big. The
 * memory is freed with the last reference (the Arrow buffer of a Polars column). */
typedef struct {
    PyObject_HEAD
    char *p;
    Py_ssize_t len;
} Owned;

static void owned_dealloc(Owned *self) {
    free(self->p);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int owned_getbuffer(Owned *self, Py_buffer *view, int flags) {
    return PyBuffer_FillInfo(view, (PyObject *)self, self->p ? self->p : (char *)"", self->len, 1,
                             flags);
}

static PyBufferProcs OWNED_BUFFER = {(getbufferproc)owned_getbuffer, NULL};

static PyTypeObject OwnedType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_eventdecode.Owned",
    .tp_basicsize = sizeof(Owned),
    .tp_dealloc = (destructor)owned_dealloc,
    .tp_as_buffer = &OWNED_BUFFER,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Memory of one decoded column, freed with the object.",
};

/* Moves b's memory into an Owned object (b is left empty), trimmed to its length; or, if it
 * lies in the arena, into a Span of it. */
static PyObject *as_owned(Buf *b, Arena *in) {
    if (b->in_arena) {
        PyObject *span = arena_wrap(in, b->p, b->len);
        if (span) *b = (Buf){0};
        return span;
    }
    Owned *o = PyObject_New(Owned, &OwnedType);
    if (!o) return NULL;
    if (b->p && b->len < b->cap) {
        char *trimmed = realloc(b->p, b->len ? b->len : 1);
        if (trimmed) b->p = trimmed;
    }
    o->p = b->p;
    o->len = (Py_ssize_t)b->len;
    b->p = NULL;
    b->len = b->cap = 0;
    return (PyObject *)o;
}

static PyObject *columns(Table *t, Arena *in) {
    PyObject *list = PyList_New(t->n);
    if (!list) return NULL;
    for (int i = 0; i < t->n; i++) {
        Field *f = &t->f[i];
        PyObject *col = f->kind == K_TEXT
            ? Py_BuildValue("(NNN)", as_owned(&f->views, in), as_owned(&f->values, in),
                            as_owned(&f->valid, in))
            : Py_BuildValue("(NN)", as_owned(&f->values, in), as_owned(&f->valid, in));
        if (!col) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, col);
    }
    return list;
}

static PyObject *decode(PyObject *self, PyObject *py_args) {
    (void)self;
    Py_buffer chunk;
    PyObject *top_spec, *arg_spec, *keep = NULL;
    Py_ssize_t args_len, keep_index = -1, arena_bytes = 0, max_chars = 0;
    Arena *in = NULL;
    Spec *spec = calloc(1, sizeof(Spec));
    if (!spec) return PyErr_NoMemory();
    if (!PyArg_ParseTuple(py_args, "y*Oy#O|nOnn", &chunk, &top_spec, &spec->args_key, &args_len,
                          &arg_spec, &keep_index, &keep, &arena_bytes, &max_chars)) {
        free(spec);
        return NULL;
    }
    if (arena_bytes > 0 && !(in = arena_new((size_t)arena_bytes))) {
        free(spec);
        PyBuffer_Release(&chunk);
        return NULL;
    }
    spec->args_len = (size_t)args_len;
    Buf args_valid = {0};
    PyObject *result = NULL;
    if (!load_table(top_spec, &spec->top) && !load_table(arg_spec, &spec->args) &&
        !load_keep(spec, keep_index, keep)) {
        Py_ssize_t rows = 0;
        int rc;
        Ptr s = (Ptr)chunk.buf;
        Py_BEGIN_ALLOW_THREADS
        if (in) {
            arena.base = in->base;
            arena.size = in->size;
            arena.used = 0;
        }
        text_chars = max_chars > 0 ? (size_t)max_chars : 0;
        rc = decode_events(s, s + chunk.len, spec, &args_valid, &rows);
        arena.base = NULL;
        Py_END_ALLOW_THREADS
        if (rc == NOMEM)
            PyErr_NoMemory();
        else if (rc == BAIL)
            result = Py_NewRef(Py_None);
        else
            result = Py_BuildValue("(nNNN)", rows, as_owned(&args_valid, in),
                                   columns(&spec->top, in), columns(&spec->args, in));
    }
    free_table(&spec->top);
    free_table(&spec->args);
    free(spec);
    buf_free(&args_valid);
    Py_XDECREF(in); /* its Spans keep it */
    PyBuffer_Release(&chunk);
    return result;
}

static PyMethodDef METHODS[] = {
    {"decode", decode, METH_VARARGS, "Decode NDJSON trace events into columns, or None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {
    PyModuleDef_HEAD_INIT, "_eventdecode", "Kineto event decoder (see _eventdecode.c).", -1, METHODS,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__eventdecode(void) {
    init_tables();
    if (PyType_Ready(&OwnedType) < 0 || arena_types_ready()) return NULL;
    return PyModule_Create(&MODULE);
}
