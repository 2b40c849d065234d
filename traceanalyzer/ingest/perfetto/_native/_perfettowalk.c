/* Perfetto packet walker: a TracePacket stream into column buffers, one pass, no Python object
 * per packet or per event.
 *
 * It does what traceanalyzer/ingest/perfetto/packets.py's PacketDecoder does packet by packet, and
 * that Python decoder stays the reference: the same sequence state (interning per
 * trusted_packet_sequence_id, incremental-state resets, packet defaults, sequence-scoped clocks),
 * the same rows and the same counts. Debug annotations are read in the same pass, as the
 * reference's NumPy pass reads them (decode_annotations below). Its contract is "the reference's
 * tables or nothing": on anything it is not sure to read exactly as the reference would (a
 * message field given twice, which protobuf merges; a wire type that does not match the field;
 * invalid UTF-8 in a name or an annotation's text; compressed_packets; an annotation name id
 * beyond 32 bits; a correlation id or a legacy duration beyond int64), feed() returns -1 and the
 * caller reads the whole stream with the Python decoder instead.
 *
 * Walker(raw_codes).feed(buffer) walks the complete packet records at the start of the buffer
 * and returns where the last one ends. Walker.take() hands over what those packets produced, as
 * bytes of column buffers, and starts the next chunk. State that outlives a chunk (sequences,
 * interned names, the track descriptors, the interned debug annotation names and strings) stays
 * in the walker.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define TYPE_SLICE_BEGIN 1
#define TYPE_SLICE_END 2
#define TYPE_COUNTER 4
#define TYPE_COMPLETE 9 /* the reference's code for legacy complete events */
#define SEQ_CLOCK_MIN 64
#define SEQ_CLOCK_MAX 127
#define BOOTTIME 6
#define PAD 16 /* zero bytes after the annotation blobs, as wire.concat leaves */

enum { OK = 0, DECLINE = 1, NOMEM = -1 };

/* ---- growable byte buffers ------------------------------------------------------------- */

typedef struct {
    char *p;
    Py_ssize_t n, cap;
} Buf;

static int buf_grow_slow(Buf *b, Py_ssize_t need)
{
    Py_ssize_t cap = b->cap ? b->cap : 4096;
    while (cap < b->n + need)
        cap *= 2;
    char *p = realloc(b->p, (size_t)cap);
    if (!p)
        return NOMEM;
    b->p = p;
    b->cap = cap;
    return OK;
}

static inline int buf_grow(Buf *b, Py_ssize_t need)
{
    return b->n + need <= b->cap ? OK : buf_grow_slow(b, need);
}

static inline int buf_put(Buf *b, const void *src, Py_ssize_t len)
{
    if (buf_grow(b, len))
        return NOMEM;
    if (len)
        memcpy(b->p + b->n, src, (size_t)len);
    b->n += len;
    return OK;
}

/* one fixed-size value: inlined to a store */
#define PUT(b, T, v)                                                                          \
    do {                                                                                      \
        T put_v_ = (v);                                                                       \
        if (buf_grow((b), (Py_ssize_t)sizeof put_v_))                                         \
            return NOMEM;                                                                     \
        memcpy((b)->p + (b)->n, &put_v_, sizeof put_v_);                                      \
        (b)->n += (Py_ssize_t)sizeof put_v_;                                                  \
    } while (0)
#define CHECK(call)                                                                           \
    do {                                                                                      \
        int check_rc_ = (call);                                                               \
        if (check_rc_)                                                                        \
            return check_rc_;                                                                 \
    } while (0)

/* ---- uint64 -> (offset, length) map, open addressing ------------------------------------ */

typedef struct {
    uint64_t key;
    int64_t a, b;
    int used;
} Slot;

typedef struct {
    Slot *slots;
    size_t cap, count;
} Map;

static size_t map_hash(uint64_t key, size_t cap)
{
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 17) & (cap - 1);
}

static Slot *map_get(const Map *m, uint64_t key)
{
    if (!m->cap)
        return NULL;
    for (size_t i = map_hash(key, m->cap);; i = (i + 1) & (m->cap - 1)) {
        if (!m->slots[i].used)
            return NULL;
        if (m->slots[i].key == key)
            return &m->slots[i];
    }
}

static Slot *map_put(Map *m, uint64_t key)
{
    if ((m->count + 1) * 2 > m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 64;
        Slot *slots = calloc(cap, sizeof *slots);
        if (!slots)
            return NULL;
        for (size_t i = 0; i < m->cap; i++) {
            if (!m->slots[i].used)
                continue;
            size_t j = map_hash(m->slots[i].key, cap);
            while (slots[j].used)
                j = (j + 1) & (cap - 1);
            slots[j] = m->slots[i];
        }
        free(m->slots);
        m->slots = slots;
        m->cap = cap;
    }
    size_t i = map_hash(key, m->cap);
    while (m->slots[i].used && m->slots[i].key != key)
        i = (i + 1) & (m->cap - 1);
    if (!m->slots[i].used) {
        m->slots[i].used = 1;
        m->slots[i].key = key;
        m->count++;
    }
    return &m->slots[i];
}

static void map_clear(Map *m)
{
    if (m->cap)
        memset(m->slots, 0, m->cap * sizeof *m->slots);
    m->count = 0;
}

/* ---- sequence state --------------------------------------------------------------------- */

typedef struct {
    int set, incremental;
    __int128 unit, current, global_base, local_base;
} Clock;

typedef struct {
    int64_t gen;
    Map names, cats; /* iid -> (offset, length) in arena */
    Buf arena;
    uint64_t default_track;
    Buf default_counter_tracks; /* uint64 */
    uint32_t clock_id;
    Clock clocks[SEQ_CLOCK_MAX - SEQ_CLOCK_MIN + 1];
} Seq;

static void seq_clear(Seq *s, int64_t gen)
{
    s->gen = gen;
    map_clear(&s->names);
    map_clear(&s->cats);
    s->arena.n = 0;
    s->default_track = 0;
    s->default_counter_tracks.n = 0;
    s->clock_id = 0;
    memset(s->clocks, 0, sizeof s->clocks);
}

/* ---- the walker ------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    Map seq_index; /* trusted_packet_sequence_id -> index in seqs */
    Seq **seqs;
    Py_ssize_t nseqs, seqs_cap;
    int64_t gens;
    /* this chunk's rows */
    Buf ev_ts, ev_type, ev_track, ev_flow, ev_flow_valid;
    Buf name_off, name_data, name_valid, cat_off, cat_data, cat_valid;
    Buf py_idx, py_key, py_int;               /* correlation_id and legacy durations */
    Buf ct_track, ct_ts, ct_value;            /* counters */
    Buf blob_data, blob_start, blob_end, blob_owner, blob_gen; /* raw debug annotations */
    /* the annotations read: values typed here (the first of each key for an event; an int
     * column's and a text column's), rows for annotations.py to type (an_first: whether the
     * row is its key's first for the event) and those left to the reference's one-by-one
     * decoding */
    Buf vi_idx, vi_code, vi_value, vi_valid, vs_idx, vs_code, vs_off, vs_data;
    Buf an_idx, an_code, an_gen, an_field, an_value, an_dstart, an_dlen, an_first;
    Buf sl_start, sl_end, sl_owner, sl_gen;
    Buf pr_begin, pr_end; /* slices paired as they came: the begin's event, the end's time */
    Py_ssize_t blobs_read; /* annotations of this chunk already read (feed twice, take once) */
    int64_t ev_base, events; /* events before this chunk, and in it */
    /* what outlives a chunk */
    PyObject *tracks;       /* uuid -> row tuple, as the reference's dict */
    PyObject *ann_names;    /* gen -> {iid: name} */
    PyObject *ann_strings;  /* gen -> {iid: text} */
    PyObject *raw_codes;    /* annotation name -> code of the column it feeds */
    Map name_codes;         /* gen << 32 | iid -> code (-1: a name nobody reads) */
    struct { const char *text; Py_ssize_t n; int64_t code; } *keys; /* raw_codes, for C */
    Py_ssize_t nkeys;
    const char *kinds; /* per column code: 'i' (an int column), 's' (a text column), or other */
    Py_ssize_t nkinds;
    int64_t seen_owner; /* the event whose annotations are being read, and its keys seen */
    uint64_t seen;
    /* slice pairing: track uuid -> (time of its last begin or end, index of its open begins) */
    Map track_open;
    Buf *open;
    Py_ssize_t nopen, open_cap;
    int unpaired; /* a track's begins and ends came out of time order: map.py pairs them */
    int64_t orphan_ends;
    int64_t packets, dropped, unknown_iids, unknown_clock, bad_timestamps;
    const char *declined;
    /* scratch, reset per event */
    Buf anns, clocks_tmp, u64a, u64b, i64a, f64a, scratch;
} Walker;

#define DECLINE_BECAUSE(w, why)                                                               \
    do {                                                                                      \
        (w)->declined = (why);                                                                \
        return DECLINE;                                                                       \
    } while (0)

/* ---- wire format ------------------------------------------------------------------------ */

typedef struct {
    const uint8_t *p;
    Py_ssize_t n;
} Slice;

/* A varint, as upb reads it: at most 10 bytes. */
static int rd_varint(const uint8_t **pp, const uint8_t *end, uint64_t *out)
{
    const uint8_t *p = *pp;
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (p >= end)
            return DECLINE;
        uint8_t byte = *p++;
        if (shift == 63 && byte > 1)
            return DECLINE; /* more than 64 bits */
        v |= (uint64_t)(byte & 0x7F) << shift;
        if (byte < 0x80) {
            *pp = p;
            *out = v;
            return OK;
        }
    }
    return DECLINE;
}

typedef struct {
    uint32_t field, wire;
    uint64_t v;  /* varint, fixed64 or fixed32 */
    Slice data;  /* length-delimited */
} Field;

/* The next field of a message. Groups (wire types 3, 4) and field 0 are declined. */
static int rd_field(const uint8_t **pp, const uint8_t *end, Field *f)
{
    uint64_t key, len;
    CHECK(rd_varint(pp, end, &key));
    f->field = (uint32_t)(key >> 3);
    f->wire = (uint32_t)(key & 7);
    if ((key >> 3) == 0 || (key >> 3) > 536870911u)
        return DECLINE;
    switch (f->wire) {
    case 0:
        return rd_varint(pp, end, &f->v);
    case 1:
        if (end - *pp < 8)
            return DECLINE;
        memcpy(&f->v, *pp, 8); /* little-endian hosts only; see the module's init */
        *pp += 8;
        return OK;
    case 5: {
        uint32_t v32;
        if (end - *pp < 4)
            return DECLINE;
        memcpy(&v32, *pp, 4);
        f->v = v32;
        *pp += 4;
        return OK;
    }
    case 2:
        CHECK(rd_varint(pp, end, &len));
        if (len > (uint64_t)(end - *pp))
            return DECLINE;
        f->data.p = *pp;
        f->data.n = (Py_ssize_t)len;
        *pp += len;
        return OK;
    default:
        return DECLINE;
    }
}

#define EXPECT(f, w)                                                                          \
    do {                                                                                      \
        if ((f).wire != (w))                                                                  \
            return DECLINE;                                                                   \
    } while (0)

/* Values of a repeated scalar field, packed or not, appended to `out` as 8-byte values.
 * kind: 0 varint, 1 fixed64/double. */
static int rd_repeated(const Field *f, int kind, Buf *out)
{
    if (f->wire == 2) {
        const uint8_t *p = f->data.p, *end = p + f->data.n;
        while (p < end) {
            uint64_t v;
            if (kind == 0) {
                CHECK(rd_varint(&p, end, &v));
            } else {
                if (end - p < 8)
                    return DECLINE;
                memcpy(&v, p, 8);
                p += 8;
            }
            PUT(out, uint64_t, v);
        }
        return OK;
    }
    if (f->wire != (kind == 0 ? 0u : 1u))
        return DECLINE;
    PUT(out, uint64_t, f->v);
    return OK;
}

/* UTF-8 as Python's strict decoder accepts it (no surrogates, no overlongs, <= U+10FFFF). */
static int valid_utf8(const uint8_t *s, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int len;
        uint32_t cp;
        if (c >= 0xC2 && c <= 0xDF) {
            len = 2;
            cp = c & 0x1F;
        } else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            cp = c & 0x0F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            cp = c & 0x07;
        } else {
            return 0;
        }
        if (n - i < len)
            return 0;
        for (int k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                return 0;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
            (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
            return 0;
        i += len;
    }
    return 1;
}

/* ---- rows ------------------------------------------------------------------------------- */

static int put_text(Buf *off, Buf *data, Buf *valid, const char *s, Py_ssize_t n)
{
    if (s) {
        CHECK(buf_put(data, s, n));
    }
    PUT(off, int64_t, (int64_t)data->n);
    PUT(valid, uint8_t, s != NULL);
    return OK;
}

static int put_event(Walker *w, int64_t ts, int8_t type, uint64_t track, const char *name,
                     Py_ssize_t name_n, const char *cat, Py_ssize_t cat_n, int has_flow,
                     uint64_t flow)
{
    PUT(&w->ev_ts, int64_t, ts);
    PUT(&w->ev_type, int8_t, type);
    PUT(&w->ev_track, uint64_t, track);
    PUT(&w->ev_flow, uint64_t, has_flow ? flow : 0);
    PUT(&w->ev_flow_valid, uint8_t, (uint8_t)has_flow);
    CHECK(put_text(&w->name_off, &w->name_data, &w->name_valid, name, name_n));
    CHECK(put_text(&w->cat_off, &w->cat_data, &w->cat_valid, cat, cat_n));
    w->events++;
    return OK;
}

static int put_py_row(Walker *w, int64_t idx, uint8_t key, int64_t value)
{
    if (idx > UINT32_MAX)
        DECLINE_BECAUSE(w, "more events than the annotation index holds");
    PUT(&w->py_idx, uint32_t, (uint32_t)idx);
    PUT(&w->py_key, uint8_t, key);
    PUT(&w->py_int, int64_t, value);
    return OK;
}

/* Pairs a slice begin or end as it comes, by map.pair_slices's rule (an end closes its track's
 * latest open begin), while each track's begins and ends come in time order: then that order is
 * the one pair_slices sorts them into. The first that does not leaves the pairing to it. */
static int pair_event(Walker *w, uint64_t track, int64_t ts, int8_t type, int64_t idx)
{
    if (w->unpaired)
        return OK;
    Slot *slot = map_get(&w->track_open, track);
    if (!slot) {
        if (w->nopen == w->open_cap) {
            Py_ssize_t cap = w->open_cap ? 2 * w->open_cap : 16;
            Buf *open = realloc(w->open, (size_t)cap * sizeof *open);
            if (!open)
                return NOMEM;
            w->open = open;
            w->open_cap = cap;
        }
        if (!(slot = map_put(&w->track_open, track)))
            return NOMEM;
        memset(&w->open[w->nopen], 0, sizeof *w->open);
        slot->a = INT64_MIN;
        slot->b = w->nopen++;
    }
    if (ts < slot->a) {
        w->unpaired = 1;
        return OK;
    }
    slot->a = ts;
    Buf *open = &w->open[slot->b];
    if (type == TYPE_SLICE_BEGIN) {
        PUT(open, int64_t, idx);
    } else if (open->n) {
        int64_t begin;
        open->n -= (Py_ssize_t)sizeof begin;
        memcpy(&begin, open->p + open->n, sizeof begin);
        PUT(&w->pr_begin, int64_t, begin);
        PUT(&w->pr_end, int64_t, ts);
    } else {
        w->orphan_ends++;
    }
    return OK;
}

static int put_counter(Walker *w, uint64_t track, int64_t ts, double value)
{
    PUT(&w->ct_track, uint64_t, track);
    PUT(&w->ct_ts, int64_t, ts);
    PUT(&w->ct_value, double, value);
    return OK;
}

/* ---- sequences -------------------------------------------------------------------------- */

static Seq *get_seq(Walker *w, uint32_t id)
{
    Slot *slot = map_get(&w->seq_index, id);
    if (slot)
        return w->seqs[slot->a];
    if (w->nseqs == w->seqs_cap) {
        Py_ssize_t cap = w->seqs_cap ? w->seqs_cap * 2 : 16;
        Seq **seqs = realloc(w->seqs, (size_t)cap * sizeof *seqs);
        if (!seqs)
            return NULL;
        w->seqs = seqs;
        w->seqs_cap = cap;
    }
    Seq *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    slot = map_put(&w->seq_index, id);
    if (!slot) {
        free(s);
        return NULL;
    }
    slot->a = w->nseqs;
    w->seqs[w->nseqs++] = s;
    s->gen = ++w->gens;
    return s;
}

static void seq_free(Seq *s)
{
    free(s->names.slots);
    free(s->cats.slots);
    free(s->arena.p);
    free(s->default_counter_tracks.p);
    free(s);
}

/* iid -> text of one InternedData entry list (EventName / EventCategory). */
/* (iid, text) of an interned entry: EventName, EventCategory, DebugAnnotationName (iid = 1,
 * name = 2) or InternedString (iid = 1, str = 2). */
static int rd_interned(Slice entry, uint64_t *iid, Slice *text)
{
    const uint8_t *p = entry.p, *end = p + entry.n;
    Field f;
    *iid = 0;
    *text = (Slice){(const uint8_t *)"", 0};
    while (p < end) {
        CHECK(rd_field(&p, end, &f));
        if (f.field == 1) {
            EXPECT(f, 0);
            *iid = f.v;
        } else if (f.field == 2) {
            EXPECT(f, 2);
            *text = f.data;
        }
    }
    return OK;
}

static int intern_entry(Walker *w, Seq *s, Map *map, Slice entry)
{
    uint64_t iid;
    Slice name;
    CHECK(rd_interned(entry, &iid, &name));
    if (!valid_utf8(name.p, name.n))
        DECLINE_BECAUSE(w, "an interned name is not valid UTF-8");
    Slot *slot = map_put(map, iid);
    if (!slot)
        return NOMEM;
    slot->a = s->arena.n;
    slot->b = name.n;
    CHECK(buf_put(&s->arena, name.p, name.n));
    return OK;
}

/* gen -> {iid: text}: the debug annotation names and string values, as the reference keeps them. */
static int intern_py(Walker *w, PyObject *by_gen, int64_t gen, Slice entry, int strict)
{
    uint64_t iid;
    Slice text;
    CHECK(rd_interned(entry, &iid, &text));
    if (strict && !valid_utf8(text.p, text.n))
        DECLINE_BECAUSE(w, "an interned annotation name is not valid UTF-8");
    PyObject *key = PyLong_FromLongLong(gen);
    if (!key)
        return NOMEM;
    PyObject *names = PyDict_GetItemWithError(by_gen, key);
    if (!names) {
        if (PyErr_Occurred() || !(names = PyDict_New())) {
            Py_DECREF(key);
            return NOMEM;
        }
        int rc = PyDict_SetItem(by_gen, key, names);
        Py_DECREF(names);
        if (rc) {
            Py_DECREF(key);
            return NOMEM;
        }
    }
    Py_DECREF(key);
    /* strings (bytes in the proto) decode as the reference does: invalid UTF-8 replaced */
    PyObject *value = PyUnicode_DecodeUTF8((const char *)text.p, text.n, "replace");
    PyObject *iid_obj = PyLong_FromUnsignedLongLong(iid);
    int rc = (value && iid_obj) ? PyDict_SetItem(names, iid_obj, value) : -1;
    if (!rc && strict) { /* a name: the code of the column it feeds, by (gen, iid) */
        int64_t code = -1;
        PyObject *found = PyDict_GetItemWithError(w->raw_codes, value);
        if (found)
            code = PyLong_AsLongLong(found);
        if (PyErr_Occurred())
            rc = -1;
        else if (iid >> 32 || gen >> 31) /* the reference keys (gen << 32 | iid) in an int64 */
            w->declined = "an annotation name id beyond 32 bits";
        else {
            Slot *slot = map_put(&w->name_codes, (uint64_t)gen << 32 | iid);
            if (!slot)
                rc = -1;
            else
                slot->a = code;
        }
    }
    Py_XDECREF(value);
    Py_XDECREF(iid_obj);
    if (rc)
        return NOMEM;
    return w->declined ? DECLINE : OK;
}

static int intern(Walker *w, Seq *s, Slice data)
{
    const uint8_t *p = data.p, *end = p + data.n;
    Field f;
    while (p < end) {
        CHECK(rd_field(&p, end, &f));
        switch (f.field) {
        case 1: /* event_categories */
            EXPECT(f, 2);
            CHECK(intern_entry(w, s, &s->cats, f.data));
            break;
        case 2: /* event_names */
            EXPECT(f, 2);
            CHECK(intern_entry(w, s, &s->names, f.data));
            break;
        case 3: /* debug_annotation_names */
            EXPECT(f, 2);
            CHECK(intern_py(w, w->ann_names, s->gen, f.data, 1));
            break;
        case 29: /* debug_annotation_string_values */
            EXPECT(f, 2);
            CHECK(intern_py(w, w->ann_strings, s->gen, f.data, 0));
            break;
        default:
            break;
        }
    }
    return OK;
}

static int defaults(Walker *w, Seq *s, Slice data)
{
    const uint8_t *p = data.p, *end = p + data.n;
    Field f;
    Slice ted = {NULL, 0};
    s->clock_id = 0;
    while (p < end) {
        CHECK(rd_field(&p, end, &f));
        if (f.field == 58) {
            EXPECT(f, 0);
            s->clock_id = (uint32_t)f.v;
        } else if (f.field == 11) {
            EXPECT(f, 2);
            if (ted.p)
                DECLINE_BECAUSE(w, "track_event_defaults given twice");
            ted = f.data;
        }
    }
    s->default_track = 0;
    s->default_counter_tracks.n = 0;
    if (!ted.p)
        return OK;
    w->u64a.n = w->u64b.n = 0;
    p = ted.p;
    end = p + ted.n;
    while (p < end) {
        CHECK(rd_field(&p, end, &f));
        if (f.field == 11) {
            EXPECT(f, 0);
            s->default_track = f.v;
        } else if (f.field == 31) {
            CHECK(rd_repeated(&f, 0, &w->u64a));
        } else if (f.field == 45) {
            CHECK(rd_repeated(&f, 0, &w->u64b));
        }
    }
    CHECK(buf_put(&s->default_counter_tracks, w->u64a.p, w->u64a.n));
    CHECK(buf_put(&s->default_counter_tracks, w->u64b.p, w->u64b.n));
    return OK;
}

typedef struct {
    uint32_t id;
    uint64_t ts, unit;
    int incremental;
} SnapClock;

static int known_clock(uint64_t v)
{
    /* ClockSnapshot.primary_trace_clock is a closed enum: other values are unknown fields */
    return v <= 6 || v == 9 || v == 10 || v == 11 || v == 63;
}

static int clock_snapshot(Walker *w, Seq *s, Slice data)
{
    const uint8_t *p = data.p, *end = p + data.n;
    Field f;
    uint64_t primary = 0;
    w->clocks_tmp.n = 0;
    while (p < end) {
        CHECK(rd_field(&p, end, &f));
        if (f.field == 2) {
            EXPECT(f, 0);
            if (known_clock(f.v))
                primary = f.v;
        } else if (f.field == 1) {
            EXPECT(f, 2);
            SnapClock c = {0, 0, 0, 0};
            const uint8_t *q = f.data.p, *qend = q + f.data.n;
            Field g;
            while (q < qend) {
                CHECK(rd_field(&q, qend, &g));
                if (g.field >= 1 && g.field <= 4)
                    EXPECT(g, 0);
                if (g.field == 1)
                    c.id = (uint32_t)g.v;
                else if (g.field == 2)
                    c.ts = g.v;
                else if (g.field == 3)
                    c.incremental = g.v != 0;
                else if (g.field == 4)
                    c.unit = g.v;
            }
            CHECK(buf_put(&w->clocks_tmp, &c, sizeof c));
        }
    }
    if (!primary)
        primary = BOOTTIME;
    const SnapClock *clocks = (const SnapClock *)w->clocks_tmp.p;
    Py_ssize_t n = w->clocks_tmp.n / (Py_ssize_t)sizeof(SnapClock);
    int have_global = 0;
    uint64_t global = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if (clocks[i].id == primary) {
            global = clocks[i].ts;
            have_global = 1;
        }
    for (Py_ssize_t i = 0; i < n && !have_global; i++)
        if (clocks[i].id < SEQ_CLOCK_MIN) {
            global = clocks[i].ts;
            have_global = 1;
        }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (clocks[i].id < SEQ_CLOCK_MIN || clocks[i].id > SEQ_CLOCK_MAX)
            continue;
        Clock *c = &s->clocks[clocks[i].id - SEQ_CLOCK_MIN];
        __int128 unit = clocks[i].unit ? (__int128)clocks[i].unit : 1;
        __int128 local;
        if (__builtin_mul_overflow((__int128)clocks[i].ts, unit, &local))
            DECLINE_BECAUSE(w, "a clock snapshot beyond 128 bits");
        c->set = 1;
        c->incremental = clocks[i].incremental;
        c->unit = unit;
        c->current = local;
        c->global_base = have_global ? (__int128)global : local;
        c->local_base = local;
    }
    return OK;
}

static PyObject *text_or_none(Slice s)
{
    if (!s.p || !s.n)
        Py_RETURN_NONE;
    return PyUnicode_DecodeUTF8((const char *)s.p, s.n, NULL);
}

static int track_descriptor(Walker *w, Slice data)
{
    const uint8_t *p = data.p, *end = p + data.n;
    Field f;
    uint64_t uuid = 0, parent = 0;
    Slice name = {NULL, 0}, process = {NULL, 0}, thread = {NULL, 0};
    int has_counter = 0;
    while (p < end) {
        CHECK(rd_field(&p, end, &f));
        switch (f.field) {
        case 1:
            EXPECT(f, 0);
            uuid = f.v;
            break;
        case 5:
            EXPECT(f, 0);
            parent = f.v;
            break;
        case 2: case 10: case 13: /* one oneof: the last one given is the one set */
            EXPECT(f, 2);
            name = f.data;
            break;
        case 3:
            EXPECT(f, 2);
            if (process.p)
                DECLINE_BECAUSE(w, "a track's process given twice");
            process = f.data;
            break;
        case 4:
            EXPECT(f, 2);
            if (thread.p)
                DECLINE_BECAUSE(w, "a track's thread given twice");
            thread = f.data;
            break;
        case 8:
            EXPECT(f, 2);
            if (has_counter)
                DECLINE_BECAUSE(w, "a track's counter given twice");
            has_counter = 1;
            break;
        default:
            break;
        }
    }
    int has_pid = 0;
    int64_t pid = 0, tid = 0;
    int has_tid = 0;
    Slice process_name = {NULL, 0}, thread_name = {NULL, 0};
    if (process.p) {
        has_pid = 1;
        const uint8_t *q = process.p, *qend = q + process.n;
        while (q < qend) {
            CHECK(rd_field(&q, qend, &f));
            if (f.field == 1) {
                EXPECT(f, 0);
                pid = (int32_t)(uint32_t)f.v;
            } else if (f.field == 6) {
                EXPECT(f, 2);
                process_name = f.data;
            }
        }
    }
    if (thread.p) {
        int64_t thread_pid = 0;
        has_pid = has_tid = 1;
        const uint8_t *q = thread.p, *qend = q + thread.n;
        while (q < qend) {
            CHECK(rd_field(&q, qend, &f));
            if (f.field == 1) {
                EXPECT(f, 0);
                thread_pid = (int32_t)(uint32_t)f.v;
            } else if (f.field == 2) {
                EXPECT(f, 0);
                tid = (int64_t)f.v;
            } else if (f.field == 5) {
                EXPECT(f, 2);
                thread_name = f.data;
            }
        }
        pid = thread_pid;
    }
    Slice texts[3] = {name, process_name, thread_name};
    for (int i = 0; i < 3; i++)
        if (texts[i].p && !valid_utf8(texts[i].p, texts[i].n))
            DECLINE_BECAUSE(w, "a track name is not valid UTF-8");
    PyObject *row = PyTuple_New(8);
    if (!row)
        return NOMEM;
    PyObject *items[8];
    items[0] = PyLong_FromUnsignedLongLong(uuid);
    items[1] = parent ? PyLong_FromUnsignedLongLong(parent) : Py_NewRef(Py_None);
    items[2] = text_or_none(name);
    items[3] = has_pid ? PyLong_FromLongLong(pid) : Py_NewRef(Py_None);
    items[4] = has_tid ? PyLong_FromLongLong(tid) : Py_NewRef(Py_None);
    items[5] = text_or_none(process_name);
    items[6] = text_or_none(thread_name);
    items[7] = PyBool_FromLong(has_counter);
    int failed = 0;
    for (int i = 0; i < 8; i++) {
        if (!items[i])
            failed = 1;
        else
            PyTuple_SET_ITEM(row, i, items[i]);
    }
    PyObject *key = failed ? NULL : PyLong_FromUnsignedLongLong(uuid);
    int rc = key ? PyDict_SetItem(w->tracks, key, row) : -1;
    Py_XDECREF(key);
    Py_DECREF(row);
    return rc ? NOMEM : OK;
}

/* ---- TrackEvent --------------------------------------------------------------------------- */

typedef struct {
    int32_t type;
    uint64_t track_uuid, name_iid, corr;
    Slice name;
    int has_name;
    uint64_t cat_iid;
    int has_cat_iid;
    Slice cat;
    int has_cat;
    int64_t counter_value;
    double double_counter;
    int has_double_counter;
    uint64_t flow[3];   /* first of flow_ids, terminating_flow_ids, flow_ids_old */
    int has_flow[3];
    Slice legacy;
    int has_legacy;
    int64_t duration_us; /* legacy complete events */
    Py_ssize_t n_extra_values, n_extra_double_values;
} TE;

static int first_of(const Field *f, int kind, Buf *scratch, uint64_t *first, int *has)
{
    scratch->n = 0;
    CHECK(rd_repeated(f, kind, scratch));
    if (!*has && scratch->n) {
        memcpy(first, scratch->p, 8);
        *has = 1;
    }
    return OK;
}

static int parse_track_event(Walker *w, Slice data, TE *te)
{
    const uint8_t *p = data.p, *end = p + data.n;
    Field f;
    memset(te, 0, sizeof *te);
    w->anns.n = w->u64a.n = w->u64b.n = w->i64a.n = w->f64a.n = 0;
    Buf *scratch = &w->scratch;
    int rc = OK;
    while (p < end && rc == OK) {
        rc = rd_field(&p, end, &f);
        if (rc)
            break;
        switch (f.field) {
        case 9:
            if (f.wire != 0) { rc = DECLINE; break; }
            te->type = (int32_t)(uint32_t)f.v;
            break;
        case 11:
            if (f.wire != 0) { rc = DECLINE; break; }
            te->track_uuid = f.v;
            break;
        case 10:
            if (f.wire != 0) { rc = DECLINE; break; }
            te->name_iid = f.v;
            break;
        case 23:
            if (f.wire != 2) { rc = DECLINE; break; }
            te->name = f.data;
            te->has_name = 1;
            break;
        case 3: {
            uint64_t v = 0;
            int has = 0;
            rc = first_of(&f, 0, scratch, &v, &has);
            if (has && !te->has_cat_iid) {
                te->cat_iid = v;
                te->has_cat_iid = 1;
            }
            break;
        }
        case 22:
            if (f.wire != 2) { rc = DECLINE; break; }
            if (!te->has_cat) {
                te->cat = f.data;
                te->has_cat = 1;
            }
            break;
        case 30:
            if (f.wire != 0) { rc = DECLINE; break; }
            te->counter_value = (int64_t)f.v;
            break;
        case 44:
            if (f.wire != 1) { rc = DECLINE; break; }
            memcpy(&te->double_counter, &f.v, 8);
            te->has_double_counter = 1;
            break;
        case 31:
            rc = rd_repeated(&f, 0, &w->u64a);
            break;
        case 12:
            rc = rd_repeated(&f, 0, &w->i64a);
            break;
        case 45:
            rc = rd_repeated(&f, 0, &w->u64b);
            break;
        case 46:
            rc = rd_repeated(&f, 1, &w->f64a);
            break;
        case 47:
            rc = first_of(&f, 1, scratch, &te->flow[0], &te->has_flow[0]);
            break;
        case 48:
            rc = first_of(&f, 1, scratch, &te->flow[1], &te->has_flow[1]);
            break;
        case 36:
            rc = first_of(&f, 0, scratch, &te->flow[2], &te->has_flow[2]);
            break;
        case 42: { /* terminating_flow_ids_old: read by nobody, but it must be well formed */
            uint64_t v = 0;
            int has = 0;
            rc = first_of(&f, 0, scratch, &v, &has);
            break;
        }
        case 52:
            if (f.wire != 0) { rc = DECLINE; break; }
            te->corr = f.v;
            break;
        case 4:
            if (f.wire != 2) { rc = DECLINE; break; }
            if (buf_put(&w->anns, &f.data, sizeof f.data))
                rc = NOMEM;
            break;
        case 6:
            if (f.wire != 2 || te->has_legacy) { rc = DECLINE; break; }
            te->legacy = f.data;
            te->has_legacy = 1;
            break;
        default:
            break;
        }
    }
    if (rc == DECLINE && !w->declined)
        w->declined = "a track event the walker cannot read as protobuf would";
    te->n_extra_values = w->i64a.n / 8;
    te->n_extra_double_values = w->f64a.n / 8;
    return rc;
}

/* A sequence-scoped clock's value in the trace clock, as the reference's _timestamp. */
static int convert_ts(Walker *w, Seq *s, uint64_t ts, uint32_t packet_clock, __int128 *out)
{
    uint32_t clock_id = packet_clock ? packet_clock : s->clock_id;
    *out = (__int128)ts;
    if (clock_id < SEQ_CLOCK_MIN)
        return OK;
    if (clock_id > SEQ_CLOCK_MAX || !s->clocks[clock_id - SEQ_CLOCK_MIN].set) {
        w->unknown_clock++;
        return OK;
    }
    Clock *c = &s->clocks[clock_id - SEQ_CLOCK_MIN];
    __int128 step;
    if (__builtin_mul_overflow((__int128)ts, c->unit, &step))
        DECLINE_BECAUSE(w, "a timestamp beyond 128 bits");
    if (c->incremental) {
        if (__builtin_add_overflow(c->current, step, &c->current))
            DECLINE_BECAUSE(w, "a timestamp beyond 128 bits");
    } else {
        c->current = step;
    }
    __int128 delta;
    if (__builtin_sub_overflow(c->current, c->local_base, &delta) ||
        __builtin_add_overflow(c->global_base, delta, out))
        DECLINE_BECAUSE(w, "a timestamp beyond 128 bits");
    return OK;
}

static int extra_counters(Walker *w, Seq *s, int64_t ts)
{
    Py_ssize_t n_tracks = (w->u64a.n + w->u64b.n) / 8;
    const uint64_t *tracks_a = (const uint64_t *)w->u64a.p, *tracks_b = (const uint64_t *)w->u64b.p;
    const uint64_t *defaults = (const uint64_t *)s->default_counter_tracks.p;
    Py_ssize_t n_defaults = s->default_counter_tracks.n / 8;
    Py_ssize_t n_values = (w->i64a.n + w->f64a.n) / 8;
    Py_ssize_t na = w->u64a.n / 8, nia = w->i64a.n / 8;
    Py_ssize_t n = n_tracks ? n_tracks : n_defaults;
    if (n_values < n)
        n = n_values;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t track = n_tracks ? (i < na ? tracks_a[i] : tracks_b[i - na]) : defaults[i];
        double value;
        if (i < nia) {
            int64_t v;
            memcpy(&v, w->i64a.p + 8 * i, 8);
            value = (double)v;
        } else {
            memcpy(&value, w->f64a.p + 8 * (i - nia), 8);
        }
        CHECK(put_counter(w, track, ts, value));
    }
    return OK;
}

/* The text a sequence interned for iid, or UNKNOWN_NAME (counted) where it never did. */
static void lookup(Walker *w, Seq *s, Map *map, uint64_t iid, const char **text, Py_ssize_t *n)
{
    static const char unknown[] = "<unknown>"; /* annotations.UNKNOWN_NAME */
    Slot *slot = map_get(map, iid);
    if (!slot) {
        w->unknown_iids++;
        *text = unknown;
        *n = (Py_ssize_t)(sizeof unknown - 1);
        return;
    }
    *text = s->arena.p ? s->arena.p + slot->a : "";
    *n = slot->b;
}

static int track_event(Walker *w, Seq *s, Slice data, uint64_t timestamp, uint32_t clock_id)
{
    TE te;
    CHECK(parse_track_event(w, data, &te));
    __int128 wide = (__int128)timestamp;
    if (s->clock_id || clock_id)
        CHECK(convert_ts(w, s, timestamp, clock_id, &wide));
    if (wide > INT64_MAX || wide < INT64_MIN) { /* beyond the columns: skipped, and counted */
        w->bad_timestamps++;
        return OK;
    }
    int64_t ts = (int64_t)wide;
    int32_t etype = te.type;
    if (etype < -128 || etype > 127) /* no type anybody reads: skipped, as by the reference */
        return OK;
    uint64_t track = te.track_uuid ? te.track_uuid : s->default_track;
    if (etype == TYPE_SLICE_END) {
        CHECK(pair_event(w, track, ts, (int8_t)etype, w->ev_base + w->events));
        return put_event(w, ts, (int8_t)etype, track, NULL, 0, NULL, 0, 0, 0);
    }
    if (etype == TYPE_COUNTER || etype == 0 || te.n_extra_values || te.n_extra_double_values) {
        if (etype == TYPE_COUNTER) {
            double value = te.has_double_counter ? te.double_counter : (double)te.counter_value;
            return put_counter(w, track, ts, value);
        }
        if (te.n_extra_values || te.n_extra_double_values)
            CHECK(extra_counters(w, s, ts));
        if (etype == 0) {
            if (!te.has_legacy)
                return OK;
            int32_t phase = 0;
            const uint8_t *p = te.legacy.p, *end = p + te.legacy.n;
            Field f;
            while (p < end) {
                CHECK(rd_field(&p, end, &f));
                if (f.field == 2) {
                    EXPECT(f, 0);
                    phase = (int32_t)(uint32_t)f.v;
                } else if (f.field == 3) {
                    EXPECT(f, 0);
                    te.duration_us = (int64_t)f.v;
                }
            }
            if (phase == 88)
                etype = TYPE_COMPLETE;
            else if (phase == 66)
                etype = TYPE_SLICE_BEGIN;
            else if (phase == 69)
                etype = TYPE_SLICE_END;
            else
                return OK;
        }
    }
    int64_t idx = w->ev_base + w->events;
    const char *name, *cat = NULL;
    Py_ssize_t name_n, cat_n = 0;
    if (te.name_iid) {
        lookup(w, s, &s->names, te.name_iid, &name, &name_n);
    } else {
        if (te.has_name && !valid_utf8(te.name.p, te.name.n))
            DECLINE_BECAUSE(w, "an event name is not valid UTF-8");
        name = te.has_name ? (const char *)te.name.p : "";
        name_n = te.has_name ? te.name.n : 0;
    }
    if (te.has_cat_iid) {
        lookup(w, s, &s->cats, te.cat_iid, &cat, &cat_n);
    } else if (te.has_cat) {
        if (!valid_utf8(te.cat.p, te.cat.n))
            DECLINE_BECAUSE(w, "a category is not valid UTF-8");
        cat = (const char *)te.cat.p;
        cat_n = te.cat.n;
    }
    int which = te.has_flow[0] ? 0 : te.has_flow[1] ? 1 : te.has_flow[2] ? 2 : -1;
    CHECK(put_event(w, ts, (int8_t)etype, track, name, name_n, cat, cat_n,
                    which >= 0, which >= 0 ? te.flow[which] : 0));
    if (etype == TYPE_SLICE_BEGIN || etype == TYPE_SLICE_END)
        CHECK(pair_event(w, track, ts, (int8_t)etype, idx));
    Py_ssize_t n_anns = w->anns.n / (Py_ssize_t)sizeof(Slice);
    const Slice *anns = (const Slice *)w->anns.p;
    for (Py_ssize_t i = 0; i < n_anns; i++) {
        PUT(&w->blob_start, int64_t, (int64_t)w->blob_data.n);
        CHECK(buf_put(&w->blob_data, anns[i].p, anns[i].n));
        PUT(&w->blob_end, int64_t, (int64_t)w->blob_data.n);
        PUT(&w->blob_owner, int64_t, idx);
        PUT(&w->blob_gen, int64_t, s->gen);
    }
    if (te.corr) {
        if (te.corr > (uint64_t)INT64_MAX)
            DECLINE_BECAUSE(w, "a correlation id beyond int64");
        CHECK(put_py_row(w, idx, 0, (int64_t)te.corr));
    }
    if (etype == TYPE_COMPLETE) {
        int64_t dur;
        if (__builtin_mul_overflow(te.duration_us, (int64_t)1000, &dur))
            DECLINE_BECAUSE(w, "a duration beyond int64");
        CHECK(put_py_row(w, idx, 1, dur));
    }
    return OK;
}

/* ---- packets ---------------------------------------------------------------------------- */

static int packet(Walker *w, Slice data)
{
    const uint8_t *p = data.p, *end = p + data.n;
    Field f;
    uint64_t timestamp = 0;
    uint32_t clock_id = 0, seq_id = 0, flags = 0, dropped = 0;
    int cleared = 0;
    Slice te = {NULL, 0}, td = {NULL, 0}, cs = {NULL, 0}, interned = {NULL, 0}, dflt = {NULL, 0};
    while (p < end) {
        CHECK(rd_field(&p, end, &f));
        switch (f.field) {
        case 8: EXPECT(f, 0); timestamp = f.v; break;
        case 58: EXPECT(f, 0); clock_id = (uint32_t)f.v; break;
        case 10: EXPECT(f, 0); seq_id = (uint32_t)f.v; break;
        case 13: EXPECT(f, 0); flags = (uint32_t)f.v; break;
        case 41: EXPECT(f, 0); cleared = f.v != 0; break;
        case 42: EXPECT(f, 0); dropped = (uint32_t)f.v; break;
#define MESSAGE(slice)                                                                        \
    EXPECT(f, 2);                                                                             \
    if ((slice).p)                                                                            \
        DECLINE_BECAUSE(w, "a packet field given twice (protobuf would merge them)");          \
    (slice) = f.data;                                                                         \
    break;
        case 11: MESSAGE(te)
        case 60: MESSAGE(td)
        case 6: MESSAGE(cs)
        case 12: MESSAGE(interned)
        case 59: MESSAGE(dflt)
#undef MESSAGE
        case 50:
            DECLINE_BECAUSE(w, "compressed packets");
        default:
            break;
        }
    }
    Seq *s = get_seq(w, seq_id);
    if (!s)
        return NOMEM;
    if ((flags & 1) || (!flags && cleared))
        seq_clear(s, ++w->gens);
    if (dropped)
        w->dropped++;
    if (interned.p)
        CHECK(intern(w, s, interned));
    if (!te.p) {
        if (dflt.p)
            CHECK(defaults(w, s, dflt));
        if (td.p)
            return track_descriptor(w, td);
        if (cs.p)
            return clock_snapshot(w, s, cs);
        return OK;
    }
    if ((flags & 1) && dflt.p)
        CHECK(defaults(w, s, dflt));
    return track_event(w, s, te, timestamp, clock_id);
}

/* ---- debug annotations -------------------------------------------------------------------
 *
 * What annotations.AnnotationDecoding.decode_annotations does with NumPy over a chunk's
 * annotations, one annotation at a time and to the byte: the same varint reader (10 bytes at most,
 * bounded by the chunk's annotation bytes, not by the annotation), the same first-field shortcut
 * for interned names nobody reads, the same scan of at most 8 fields, the same "slow" annotations
 * (malformed, longer, or with nested values, dicts or arrays) left to the reference's one-by-one
 * decoding, and the same rows, in the same order, for its typed values. */

#define SCAN_FIELDS 8

typedef struct {
    int64_t field, dstart, dlen;
    uint64_t value;
} AnnField;

/* wire.varints: (value, length), length -1 when not ended in 10 bytes before limit */
static int64_t np_varint(const uint8_t *buf, int64_t pos, int64_t limit, uint64_t *value)
{
    uint64_t v = 0;
    for (int k = 0; k < 10; k++) {
        if (pos + k >= limit)
            return -1;
        uint8_t byte = buf[pos + k];
        v |= (uint64_t)(byte & 0x7F) << (7 * k);
        if (byte < 0x80) {
            *value = v;
            return k + 1;
        }
    }
    return -1;
}

/* code and whether the id is unknown, as AnnotationDecoding._key_codes */
static int64_t key_code(Walker *w, int64_t gen, uint64_t iid, int *unknown)
{
    *unknown = 0;
    if (!iid)
        return -1;
    if (iid >> 32) { /* beyond the reference's int64 key: leave it to the reference */
        w->declined = "an annotation name id beyond 32 bits";
        return -1;
    }
    Slot *slot = map_get(&w->name_codes, (uint64_t)gen << 32 | iid);
    if (!slot) {
        *unknown = 1;
        return -1;
    }
    return slot->a;
}

static int64_t text_code(Walker *w, const uint8_t *text, int64_t n)
{
    for (Py_ssize_t k = 0; k < w->nkeys; k++)
        if (w->keys[k].n == n && memcmp(w->keys[k].text, text, (size_t)n) == 0)
            return w->keys[k].code;
    return -1;
}

static int is_value_field(int64_t field)
{
    return field == 2 || field == 3 || field == 4 || field == 5 || field == 6 || field == 7 ||
           field == 9 || field == 17;
}

/* Types an annotation's value as annotations.py's _typed_values and map.py's wide table would
 * for a column of kind 'i' or 's'; returns 0 where that needs Polars's own parsing or
 * formatting (text to int, double to text, interned strings), and the row is left to it. */
static int typed_value(Walker *w, char kind, uint32_t idx, int64_t code, const AnnField *v,
                       const uint8_t *buf)
{
    int field = (int)v->field;
    int is_int = field == 2 || field == 4 || field == 7 || field == 3;
    if (kind == 'i') {
        int64_t value = (int64_t)v->value;
        uint8_t valid = 1;
        if (field == 3 && v->value > (uint64_t)INT64_MAX)
            valid = 0; /* kept as text by the reference, which then does not parse as int64 */
        else if (field == 5) {
            double d;
            memcpy(&d, &v->value, sizeof d);
            if (!(isfinite(d) && round(d) == d && fabs(d) < 9223372036854775808.0))
                return 0;
            value = (int64_t)d;
        } else if (!is_int)
            return 0;
        PUT(&w->vi_idx, uint32_t, idx);
        PUT(&w->vi_code, uint8_t, (uint8_t)code);
        PUT(&w->vi_value, int64_t, valid ? value : 0);
        PUT(&w->vi_valid, uint8_t, valid);
        return 1;
    }
    if (kind != 's')
        return 0;
    if (field == 6 || field == 9) {
        CHECK(buf_put(&w->vs_data, buf + v->dstart, v->dlen));
    } else if (is_int) {
        char text[24];
        int n = field == 3 && v->value > (uint64_t)INT64_MAX
                    ? snprintf(text, sizeof text, "%llu", (unsigned long long)v->value)
                    : snprintf(text, sizeof text, "%lld", (long long)(int64_t)v->value);
        CHECK(buf_put(&w->vs_data, text, n));
    } else
        return 0;
    PUT(&w->vs_idx, uint32_t, idx);
    PUT(&w->vs_code, uint8_t, (uint8_t)code);
    PUT(&w->vs_off, int64_t, (int64_t)w->vs_data.n);
    return 1;
}

static int decode_annotations(Walker *w)
{
    const uint8_t *buf = (const uint8_t *)w->blob_data.p;
    int64_t limit = w->blob_data.n;
    Py_ssize_t n = w->blob_start.n / 8;
    const int64_t *starts = (const int64_t *)w->blob_start.p, *ends = (const int64_t *)w->blob_end.p;
    const int64_t *owners = (const int64_t *)w->blob_owner.p, *gens = (const int64_t *)w->blob_gen.p;
    AnnField fields[SCAN_FIELDS];
    Py_ssize_t i = w->blobs_read;
    w->blobs_read = n;
    for (; i < n; i++) {
        int64_t s = starts[i], e = ends[i], gen = gens[i];
        int unknown, first = 0;
        if (e > s && buf[s] == 0x08) {
            uint64_t iid;
            if (np_varint(buf, s + 1, limit, &iid) > 0) {
                first = 1;
                int64_t code = key_code(w, gen, iid, &unknown);
                if (w->declined)
                    return DECLINE;
                w->unknown_iids += unknown;
                if (code < 0)
                    continue; /* a name nobody reads (or never defined): not even scanned */
            }
        }
        int nf = 0, bad = 0;
        int64_t cur = s;
        for (int k = 0; k < SCAN_FIELDS && cur < e; k++) {
            uint64_t key = 0, value = 0;
            int64_t klen = np_varint(buf, cur, limit, &key);
            int broken = klen < 0;
            int64_t pos = cur + (klen > 0 ? klen : 0);
            int wire = (int)(key & 7);
            int64_t field = (int64_t)(key >> 3), dstart = 0, dlen = 0, nxt = -1;
            if (!broken) {
                if (wire == 0) {
                    int64_t vlen = np_varint(buf, pos, limit, &value);
                    nxt = vlen >= 0 ? pos + vlen : -1;
                } else if (wire == 2) {
                    uint64_t len = 0;
                    int64_t vlen = np_varint(buf, pos, limit, &len);
                    int64_t body = pos + (vlen > 0 ? vlen : 0);
                    dstart = body;
                    dlen = (int64_t)len;
                    nxt = (vlen >= 0 && len < ((uint64_t)1 << 40)) ? body + dlen : -1;
                } else if (wire == 1 || wire == 5) {
                    int size = wire == 1 ? 8 : 4;
                    if (pos + size <= e) {
                        for (int b = 0; b < size; b++)
                            value |= (uint64_t)buf[pos + b] << (8 * b);
                        nxt = pos + size;
                    }
                }
            }
            if (broken || nxt < 0 || nxt > e || field == 0) {
                bad = 1;
                cur = e;
                break;
            }
            fields[nf++] = (AnnField){field, dstart, dlen, value};
            cur = nxt;
        }
        if (cur < e)
            bad = 1; /* more fields than the scan reads */
        int slow = bad;
        for (int k = 0; k < nf && !slow; k++)
            slow = fields[k].field == 8 || fields[k].field == 11 || fields[k].field == 12;
        if (slow) {
            for (int k = 0; k < nf; k++) /* the reference reads every name it scanned as text */
                if (fields[k].field == 10 && !valid_utf8(buf + fields[k].dstart, fields[k].dlen))
                    DECLINE_BECAUSE(w, "an annotation name is not valid UTF-8");
            PUT(&w->sl_start, int64_t, s);
            PUT(&w->sl_end, int64_t, e);
            PUT(&w->sl_owner, int64_t, owners[i]);
            PUT(&w->sl_gen, int64_t, gen);
            continue;
        }
        uint64_t iid = 0;
        int text = -1, value_at = -1;
        for (int k = 0; k < nf; k++) {
            if (fields[k].field == 1)
                iid = fields[k].value; /* the last one wins, as in the reference */
            else if (fields[k].field == 10)
                text = k;
            if (value_at < 0 && is_value_field(fields[k].field))
                value_at = k; /* the first one wins */
        }
        int64_t code = key_code(w, gen, iid, &unknown);
        if (w->declined)
            return DECLINE;
        if (unknown && !first)
            w->unknown_iids++;
        if (text >= 0) {
            const uint8_t *t = buf + fields[text].dstart;
            if (!valid_utf8(t, fields[text].dlen))
                DECLINE_BECAUSE(w, "an annotation name is not valid UTF-8");
            if (!iid)
                code = text_code(w, t, fields[text].dlen);
        }
        if (code < 0 || value_at < 0)
            continue;
        AnnField *v = &fields[value_at];
        if ((v->field == 6 || v->field == 9) && !valid_utf8(buf + v->dstart, v->dlen))
            DECLINE_BECAUSE(w, "an annotation's text is not valid UTF-8");
        if (owners[i] > UINT32_MAX)
            DECLINE_BECAUSE(w, "more events than the annotation index holds");
        if (owners[i] != w->seen_owner) {
            w->seen_owner = owners[i];
            w->seen = 0;
        }
        uint64_t bit = (uint64_t)1 << code;
        int first_of_key = !(w->seen & bit);
        w->seen |= bit;
        char kind = code < w->nkinds ? w->kinds[code] : 0;
        if (first_of_key) {
            int rc = typed_value(w, kind, (uint32_t)owners[i], code, v, buf);
            if (rc < 0)
                return rc;
            if (rc)
                continue;
        } else if (v->field != 17) {
            continue; /* not the first: nothing reads it, and typing it counts nothing */
        }
        PUT(&w->an_first, uint8_t, (uint8_t)first_of_key);
        PUT(&w->an_idx, uint32_t, (uint32_t)owners[i]);
        PUT(&w->an_code, int64_t, code);
        PUT(&w->an_gen, int64_t, gen);
        PUT(&w->an_field, int64_t, v->field);
        PUT(&w->an_value, uint64_t, v->value);
        PUT(&w->an_dstart, int64_t, v->dstart);
        PUT(&w->an_dlen, int64_t, v->dlen);
    }
    return OK;
}

/* ---- Python type ---------------------------------------------------------------------------- */

/* This chunk's buffers: the columns take() hands over, by name, then those only the walk reads. */
static const struct {
    const char *name;
    size_t offset;
    Py_ssize_t pad;
} CHUNK_BUFS[] = {
    {"ev_ts", offsetof(Walker, ev_ts), 0},
    {"ev_type", offsetof(Walker, ev_type), 0},
    {"ev_track", offsetof(Walker, ev_track), 0},
    {"ev_flow", offsetof(Walker, ev_flow), 0},
    {"ev_flow_valid", offsetof(Walker, ev_flow_valid), 0},
    {"name_off", offsetof(Walker, name_off), 0},
    {"name_data", offsetof(Walker, name_data), 0},
    {"name_valid", offsetof(Walker, name_valid), 0},
    {"cat_off", offsetof(Walker, cat_off), 0},
    {"cat_data", offsetof(Walker, cat_data), 0},
    {"cat_valid", offsetof(Walker, cat_valid), 0},
    {"py_idx", offsetof(Walker, py_idx), 0},
    {"py_key", offsetof(Walker, py_key), 0},
    {"py_int", offsetof(Walker, py_int), 0},
    {"ct_track", offsetof(Walker, ct_track), 0},
    {"ct_ts", offsetof(Walker, ct_ts), 0},
    {"ct_value", offsetof(Walker, ct_value), 0},
    {"blob_data", offsetof(Walker, blob_data), PAD},
    {"vi_idx", offsetof(Walker, vi_idx), 0},
    {"vi_code", offsetof(Walker, vi_code), 0},
    {"vi_value", offsetof(Walker, vi_value), 0},
    {"vi_valid", offsetof(Walker, vi_valid), 0},
    {"vs_idx", offsetof(Walker, vs_idx), 0},
    {"vs_code", offsetof(Walker, vs_code), 0},
    {"vs_off", offsetof(Walker, vs_off), 0},
    {"vs_data", offsetof(Walker, vs_data), 0},
    {"an_first", offsetof(Walker, an_first), 0},
    {"an_idx", offsetof(Walker, an_idx), 0},
    {"an_code", offsetof(Walker, an_code), 0},
    {"an_gen", offsetof(Walker, an_gen), 0},
    {"an_field", offsetof(Walker, an_field), 0},
    {"an_value", offsetof(Walker, an_value), 0},
    {"an_dstart", offsetof(Walker, an_dstart), 0},
    {"an_dlen", offsetof(Walker, an_dlen), 0},
    {"pr_begin", offsetof(Walker, pr_begin), 0},
    {"pr_end", offsetof(Walker, pr_end), 0},
    {"sl_start", offsetof(Walker, sl_start), 0},
    {"sl_end", offsetof(Walker, sl_end), 0},
    {"sl_owner", offsetof(Walker, sl_owner), 0},
    {"sl_gen", offsetof(Walker, sl_gen), 0},
    {NULL, offsetof(Walker, blob_start), 0},
    {NULL, offsetof(Walker, blob_end), 0},
    {NULL, offsetof(Walker, blob_owner), 0},
    {NULL, offsetof(Walker, blob_gen), 0},
};
/* Buffers reused for each event or message. */
static const size_t SCRATCH_BUFS[] = {
    offsetof(Walker, anns), offsetof(Walker, clocks_tmp), offsetof(Walker, u64a),
    offsetof(Walker, u64b), offsetof(Walker, i64a), offsetof(Walker, f64a),
    offsetof(Walker, scratch),
};
#define N_CHUNK_BUFS (sizeof CHUNK_BUFS / sizeof *CHUNK_BUFS)
#define N_SCRATCH_BUFS (sizeof SCRATCH_BUFS / sizeof *SCRATCH_BUFS)

static Buf *buf_at(Walker *w, size_t offset)
{
    return (Buf *)((char *)w + offset);
}

/* Empties the chunk's buffers for the next one; the text offset arrays start with their 0. */
static int walker_start_chunk(Walker *w)
{
    for (size_t i = 0; i < N_CHUNK_BUFS; i++)
        buf_at(w, CHUNK_BUFS[i].offset)->n = 0;
    w->ev_base += w->events;
    w->events = 0;
    w->blobs_read = 0;
    PUT(&w->name_off, int64_t, 0);
    PUT(&w->cat_off, int64_t, 0);
    PUT(&w->vs_off, int64_t, 0);
    return OK;
}

static void walker_dealloc(Walker *w)
{
    for (size_t i = 0; i < N_CHUNK_BUFS; i++)
        free(buf_at(w, CHUNK_BUFS[i].offset)->p);
    for (size_t i = 0; i < N_SCRATCH_BUFS; i++)
        free(buf_at(w, SCRATCH_BUFS[i])->p);
    for (Py_ssize_t i = 0; i < w->nseqs; i++)
        seq_free(w->seqs[i]);
    free(w->seqs);
    free(w->seq_index.slots);
    free(w->name_codes.slots);
    free(w->track_open.slots);
    for (Py_ssize_t i = 0; i < w->nopen; i++)
        free(w->open[i].p);
    free(w->open);
    for (Py_ssize_t i = 0; i < w->nkeys; i++)
        free((void *)w->keys[i].text);
    free(w->keys);
    free((void *)w->kinds);
    Py_XDECREF(w->raw_codes);
    Py_XDECREF(w->tracks);
    Py_XDECREF(w->ann_names);
    Py_XDECREF(w->ann_strings);
    Py_TYPE(w)->tp_free((PyObject *)w);
}

/* Walker(raw_codes, kinds): raw_codes maps each debug annotation name read to its column's code
 * (below 64), kinds[code] is 'i' for an int column, 's' for a text column */
static PyObject *walker_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *raw_codes;
    const char *kinds;
    Py_ssize_t nkinds;
    static char *kwlist[] = {"raw_codes", "kinds", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!s#", kwlist, &PyDict_Type, &raw_codes,
                                     &kinds, &nkinds))
        return NULL;
    Walker *w = (Walker *)type->tp_alloc(type, 0);
    if (!w)
        return NULL;
    w->seen_owner = -1;
    char *kinds_copy = malloc((size_t)(nkinds ? nkinds : 1));
    if (!kinds_copy) {
        Py_DECREF(w);
        return PyErr_NoMemory();
    }
    memcpy(kinds_copy, kinds, (size_t)nkinds);
    w->kinds = kinds_copy;
    w->nkinds = nkinds;
    w->raw_codes = Py_NewRef(raw_codes);
    Py_ssize_t n = PyDict_Size(raw_codes), pos = 0, k = 0;
    PyObject *key, *value;
    w->keys = calloc((size_t)(n ? n : 1), sizeof *w->keys);
    if (!w->keys) {
        Py_DECREF(w);
        return PyErr_NoMemory();
    }
    while (PyDict_Next(raw_codes, &pos, &key, &value)) {
        Py_ssize_t len;
        const char *text = PyUnicode_Check(key) ? PyUnicode_AsUTF8AndSize(key, &len) : NULL;
        long long code = text ? PyLong_AsLongLong(value) : -1;
        if (!text || PyErr_Occurred() || code < 0 || code >= 64) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "raw_codes maps str to an int in [0, 64)");
            Py_DECREF(w);
            return NULL;
        }
        char *copy = malloc((size_t)(len ? len : 1));
        if (!copy) {
            Py_DECREF(w);
            return PyErr_NoMemory();
        }
        memcpy(copy, text, (size_t)len);
        w->keys[k].text = copy;
        w->keys[k].n = len;
        w->keys[k].code = code;
        w->nkeys = ++k;
    }
    w->tracks = PyDict_New();
    w->ann_names = PyDict_New();
    w->ann_strings = PyDict_New();
    if (!w->tracks || !w->ann_names || !w->ann_strings) {
        Py_DECREF(w);
        return NULL;
    }
    if (walker_start_chunk(w)) {
        Py_DECREF(w);
        return PyErr_NoMemory();
    }
    return (PyObject *)w;
}

/* feed(buffer) -> end of the last complete packet walked, or -1 (declined: see .declined) */
static PyObject *walker_feed(Walker *w, PyObject *arg)
{
    Py_buffer view;
    if (w->declined)
        return PyLong_FromLong(-1);
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const uint8_t *start = view.buf, *p = start, *end = start + view.len;
    int rc = OK;
    while (p < end) {
        const uint8_t *q = p;
        uint64_t len;
        if (*q != 0x0A) { /* anything but a packet record: the reference decides */
            w->declined = "a top-level field that is not a packet";
            rc = DECLINE;
            break;
        }
        q++;
        const uint8_t *r = q;
        while (r < end && r - q < 10 && (*r & 0x80))
            r++;
        if (r == end)
            break; /* an incomplete record: the caller keeps it for the next buffer */
        if (rd_varint(&q, end, &len)) {
            w->declined = "a malformed packet length";
            rc = DECLINE;
            break;
        }
        if (len > (uint64_t)(end - q))
            break;
        rc = packet(w, (Slice){q, (Py_ssize_t)len});
        if (rc)
            break;
        w->packets++;
        p = q + len;
    }
    if (rc == OK)
        rc = decode_annotations(w);
    Py_ssize_t consumed = p - start;
    PyBuffer_Release(&view);
    if (rc == NOMEM) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        return NULL;
    }
    if (rc == DECLINE) {
        if (!w->declined)
            w->declined = "malformed protobuf";
        return PyLong_FromLong(-1);
    }
    return PyLong_FromSsize_t(consumed);
}

static PyObject *bytes_of(Buf *b, Py_ssize_t pad)
{
    PyObject *out = PyBytes_FromStringAndSize(NULL, b->n + pad);
    if (!out)
        return NULL;
    if (b->n)
        memcpy(PyBytes_AS_STRING(out), b->p, (size_t)b->n);
    memset(PyBytes_AS_STRING(out) + b->n, 0, (size_t)pad);
    return out;
}

/* take() -> dict of this chunk's column buffers (bytes); the next chunk starts empty */
static PyObject *walker_take(Walker *w, PyObject *unused)
{
    (void)unused;
    PyObject *out = PyDict_New();
    if (!out)
        return NULL;
    for (size_t i = 0; i < N_CHUNK_BUFS && CHUNK_BUFS[i].name; i++) {
        PyObject *b = bytes_of(buf_at(w, CHUNK_BUFS[i].offset), CHUNK_BUFS[i].pad);
        if (!b || PyDict_SetItemString(out, CHUNK_BUFS[i].name, b)) {
            Py_XDECREF(b);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(b);
    }
    PyObject *events = PyLong_FromLongLong(w->events);
    if (!events || PyDict_SetItemString(out, "events", events)) {
        Py_XDECREF(events);
        Py_DECREF(out);
        return NULL;
    }
    Py_DECREF(events);
    if (walker_start_chunk(w)) {
        Py_DECREF(out);
        return PyErr_NoMemory();
    }
    return out;
}

static PyObject *walker_get_declined(Walker *w, void *closure)
{
    (void)closure;
    if (!w->declined)
        Py_RETURN_NONE;
    return PyUnicode_FromString(w->declined);
}

#define COUNT_GETTER(field)                                                                   \
    static PyObject *walker_get_##field(Walker *w, void *closure)                             \
    {                                                                                         \
        (void)closure;                                                                        \
        return PyLong_FromLongLong(w->field);                                                 \
    }
COUNT_GETTER(packets)
COUNT_GETTER(dropped)
COUNT_GETTER(unknown_iids)
COUNT_GETTER(unknown_clock)
COUNT_GETTER(bad_timestamps)
COUNT_GETTER(orphan_ends)

static PyObject *walker_get_paired(Walker *w, void *closure)
{
    (void)closure;
    return PyBool_FromLong(!w->unpaired);
}

static PyObject *walker_get_unended(Walker *w, void *closure)
{
    (void)closure;
    Py_ssize_t open = 0;
    for (Py_ssize_t i = 0; i < w->nopen; i++)
        open += w->open[i].n / (Py_ssize_t)sizeof(int64_t);
    return PyLong_FromSsize_t(open);
}

#define OBJECT_GETTER(field)                                                                  \
    static PyObject *walker_get_##field(Walker *w, void *closure)                             \
    {                                                                                         \
        (void)closure;                                                                        \
        return Py_NewRef(w->field);                                                           \
    }
OBJECT_GETTER(tracks)
OBJECT_GETTER(ann_names)
OBJECT_GETTER(ann_strings)

static PyGetSetDef WALKER_GETSET[] = {
    {"declined", (getter)walker_get_declined, NULL, "why the walker gave up, or None", NULL},
    {"packets", (getter)walker_get_packets, NULL, "packets walked", NULL},
    {"dropped", (getter)walker_get_dropped, NULL, "packets flagged previous_packet_dropped", NULL},
    {"unknown_iids", (getter)walker_get_unknown_iids, NULL, "interned ids never defined", NULL},
    {"unknown_clock", (getter)walker_get_unknown_clock, NULL, "packets on an unknown clock", NULL},
    {"bad_timestamps", (getter)walker_get_bad_timestamps, NULL, "events skipped: ts beyond int64",
     NULL},
    {"paired", (getter)walker_get_paired, NULL, "whether pr_begin/pr_end pair every slice", NULL},
    {"unended", (getter)walker_get_unended, NULL, "slice begins never ended (when paired)", NULL},
    {"orphan_ends", (getter)walker_get_orphan_ends, NULL, "slice ends with no begin (when paired)",
     NULL},
    {"tracks", (getter)walker_get_tracks, NULL, "uuid -> track row", NULL},
    {"ann_names", (getter)walker_get_ann_names, NULL, "gen -> {iid: annotation name}", NULL},
    {"ann_strings", (getter)walker_get_ann_strings, NULL, "gen -> {iid: string value}", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef WALKER_METHODS[] = {
    {"feed", (PyCFunction)walker_feed, METH_O, "walk the complete packets of a buffer"},
    {"take", (PyCFunction)walker_take, METH_NOARGS, "this chunk's columns, as bytes"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject WalkerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "traceanalyzer.ingest.perfetto._native._perfettowalk.Walker",
    .tp_basicsize = sizeof(Walker),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Walks a Perfetto packet stream into column buffers (see _perfettowalk.c).",
    .tp_new = walker_new,
    .tp_dealloc = (destructor)walker_dealloc,
    .tp_methods = WALKER_METHODS,
    .tp_getset = WALKER_GETSET,
};

static struct PyModuleDef MODULE = {
    PyModuleDef_HEAD_INIT, "_perfettowalk", "Perfetto packet walker (see _perfettowalk.c).", -1,
    NULL, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__perfettowalk(void)
{
    const uint16_t probe = 1;
    if (*(const uint8_t *)&probe != 1) { /* fixed64 and double are read as the host lays them */
        PyErr_SetString(PyExc_ImportError, "the Perfetto walker needs a little-endian host");
        return NULL;
    }
    if (PyType_Ready(&WalkerType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&MODULE);
    if (!m)
        return NULL;
    if (PyModule_AddObjectRef(m, "Walker", (PyObject *)&WalkerType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
