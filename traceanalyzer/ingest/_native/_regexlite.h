/* A small regex matcher that answers as Polars' str.contains (the Rust regex crate's is_match)
 * does, so that kernel categories (categories.py KERNEL_PATTERNS) can be computed in C. Texts
 * are ASCII: the caller lowercases them and sends anything else to Polars. (A byte >= 0x80 would
 * count as one non-word character, taken only by '.', negated classes and \D \W \S.)
 *
 * Syntax: literals, and escaped ASCII punctuation, space or control characters (literals in Rust
 * too); \n \t \r \f \v \a \xHH \x{H..} below 0x80; '.'; [...] with ranges, a leading '^' and
 * \d \w \s \D \W \S, which also stand alone; (...) and (?:...); (?flags) and (?flags:...) with
 * i m s u U; '|' with empty branches; * + ? {m} {m,} {m,n}, lazy or not, stacked; ^ $ \A \z \b
 * \B \< \>. regex_compile returns NULL for anything else: named groups, look-around,
 * backreferences, \p, \u, \b{...}, nested classes and [:alpha:], the class operators && -- ~~,
 * spaces inside {m,n}, counts over 1000, the x and R flags, non-ASCII pattern bytes; for what
 * Rust refuses too (a '.', negated class or \D \W \S under (?-u), where it could match a byte of
 * invalid UTF-8); for a pattern past the limits below; on out of memory. The caller then asks
 * Polars, so NULL is always safe.
 *
 * The pattern compiles to a Thompson NFA, and that at once to a whole DFA (subset construction
 * over byte classes), so that a search is one table load per byte: linear time, no recursion,
 * no allocation, and a read-only Regex that threads may share. A DFA state knows what the byte
 * before it was (none, '\n', a word byte) and a transition knows the byte after, which is all
 * that ^ $ \b \B need; so a match is seen one byte after it ends, or at the end of the text.
 *
 * API (at the end): regex_compile, regex_search, regex_free. */
#ifndef TRACEANALYZER_REGEXLITE_H
#define TRACEANALYZER_REGEXLITE_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifndef RX_MAX_STATES /* the limits may be set before the #include */
#define RX_MAX_DEPTH 64       /* nested groups: bounds the parser's recursion */
#define RX_MAX_REPEAT 1000    /* largest count in {m,n} (Rust takes more) */
#define RX_MAX_PROG 20000     /* NFA instructions */
#define RX_MAX_STATES 4096    /* DFA states (a power of 2) */
#define RX_MAX_WORK 20000000L /* NFA steps to build the DFA: some 40 ms */
#endif
#define RX_MATCHED UINT32_MAX /* a transition that completes a match */

typedef struct { uint64_t w[4]; } RxSet; /* a set of bytes */
typedef struct Regex { uint32_t ncls; uint8_t cls[256]; uint32_t *trans; } Regex;

enum { RX_CHAR, RX_SPLIT, RX_JMP, RX_ASSERT, RX_MATCH };
enum { RX_TEXT_START, RX_TEXT_END, RX_LINE_START, RX_LINE_END, RX_WORD_B, RX_NOT_WORD_B,
       RX_WORD_START, RX_WORD_END };
enum { RX_AT_START = 1, RX_AFTER_NL = 2, RX_AFTER_WORD = 4 }; /* facts about the byte before */
enum { RXF_I = 1, RXF_M = 2, RXF_S = 4, RXF_ASCII = 8, RXF_UNGREEDY = 16 };

/* CHAR: x is the set. SPLIT, JMP: x and y are offsets from the instruction, so that a piece of
 * code can be copied anywhere (for {m,n}) with its jumps intact. */
typedef struct { uint8_t op, kind; int32_t x, y; } RxInst;
typedef struct {
    const unsigned char *p, *end;
    RxInst *prog;
    RxSet *set;
    int n, cap, nset, capset, depth;
    unsigned facts; /* the facts that the assertions read */
} RxParser;

static void rx_add(RxSet *s, int c) { s->w[c >> 6] |= (uint64_t)1 << (c & 63); }
static int rx_has(const RxSet *s, int c) { return (int)(s->w[c >> 6] >> (c & 63) & 1); }
static int rx_isdigit(int c) { return c >= '0' && c <= '9'; }
static int rx_isalpha(int c) { return (c | 32) >= 'a' && (c | 32) <= 'z'; }
static int rx_isword(int c) { return rx_isdigit(c) || rx_isalpha(c) || c == '_'; }

/* p with room for need elements (*cap updated), or NULL on out of memory, p then still valid. */
static void *rx_grow(void *p, int *cap, int need, size_t size) {
    int c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *q = c == *cap ? p : realloc(p, (size_t)c * size);
    if (q) *cap = c;
    return q;
}

/* Appends in[0:len] to the program; 0 past RX_MAX_PROG or on out of memory. */
static int rx_copy(RxParser *ps, const RxInst *in, int len) {
    RxInst *prog = ps->n + len > RX_MAX_PROG
                       ? NULL
                       : (RxInst *)rx_grow(ps->prog, &ps->cap, ps->n + len, sizeof *in);
    if (!prog) return 0;
    memcpy((ps->prog = prog) + ps->n, in, sizeof *in * (size_t)len);
    ps->n += len;
    return 1;
}

static int rx_emit(RxParser *ps, int op, int kind, int x, int y) {
    RxInst in = {(uint8_t)op, (uint8_t)kind, x, y};
    return rx_copy(ps, &in, 1) ? 1 : -1;
}

/* A CHAR for set s, with both cases of each letter under (?i), then negated if neg: Rust folds a
 * class before negating it, so (?i)[^a] takes no 'A'. Equal sets share one entry, which keeps
 * the byte classes few. */
static int rx_char(RxParser *ps, RxSet s, unsigned flags, int neg) {
    int i;
    for (int c = 'a'; c <= 'z' && (flags & RXF_I); c++)
        if (rx_has(&s, c) || rx_has(&s, c - 32)) rx_add(&s, c), rx_add(&s, c - 32);
    for (i = 0; i < 4 && neg; i++) s.w[i] = ~s.w[i];
    for (i = 0; i < ps->nset && memcmp(&ps->set[i], &s, sizeof s); i++) {}
    if (i == ps->nset) {
        RxSet *set = (RxSet *)rx_grow(ps->set, &ps->capset, i + 1, sizeof s);
        if (!set) return -1;
        (ps->set = set)[ps->nset++] = s;
    }
    return rx_emit(ps, RX_CHAR, 0, i, 0);
}

static int rx_assert(RxParser *ps, int kind) {
    ps->facts |= kind == RX_TEXT_START ? RX_AT_START : kind == RX_LINE_START ? RX_AFTER_NL
               : kind >= RX_WORD_B ? RX_AFTER_WORD : 0;
    return rx_emit(ps, RX_ASSERT, kind, 0, 0);
}

/* Adds \d \w \s, or (upper case) their complements, to *s; 0 if c is none of these. */
static int rx_perl(int c, RxSet *s) {
    if (!c || !strchr("dDwWsS", c)) return 0;
    for (int b = 0; b < 256; b++) {
        int in = b < 128 && ((c | 32) == 'd'   ? rx_isdigit(b)
                             : (c | 32) == 'w' ? rx_isword(b)
                                               : (b >= '\t' && b <= '\r') || b == ' ');
        if (in != (c < 'a')) rx_add(s, b);
    }
    return 1;
}

/* The character an escape stands for (ps->p just past the backslash), or -1. Rust lets any
 * ASCII character but a letter, a digit, '<' and '>' stand for itself. */
static int rx_escape_char(RxParser *ps) {
    static const char named[] = "n\nt\tr\rf\fv\va\a";
    int c = *ps->p++, v = 0, digits = 0, braced;
    const char *k = c ? strchr(named, c) : NULL;
    if (k && (k - named) % 2 == 0) return k[1];
    if (c == 'x') {
        ps->p += braced = ps->p < ps->end && *ps->p == '{';
        for (; ps->p < ps->end && (braced || digits < 2); ps->p++, digits++) {
            int d = *ps->p | 32;
            if (!rx_isdigit(d) && (d < 'a' || d > 'f')) break;
            if ((v = v * 16 + (d <= '9' ? d - '0' : d - 'a' + 10)) >= 0x80) return -1;
        }
        return digits && (braced ? ps->p < ps->end && *ps->p++ == '}' : digits == 2) ? v : -1;
    }
    return c >= 0x80 || c == '<' || c == '>' || (c != '_' && rx_isword(c)) ? -1 : c;
}

/* One member of a class: its character, or -2 for a perl class (added to *s), or -1. */
static int rx_class_atom(RxParser *ps, RxSet *s, unsigned flags) {
    int c = *ps->p++;
    if (c == '[' || c >= 0x80) return -1; /* nested classes and [:alpha:] are not supported */
    if (c != '\\') return c;
    if (ps->p >= ps->end) return -1;
    if (!rx_perl(c = *ps->p, s)) return rx_escape_char(ps);
    ps->p++;
    return (flags & RXF_ASCII) && c < 'a' ? -1 : -2; /* see rx_escape */
}

/* A bracket class, ps->p just past the '['. */
static int rx_class(RxParser *ps, unsigned flags) {
    RxSet s = {{0}};
    int neg = ps->p < ps->end && *ps->p == '^', first = 1;
    for (ps->p += neg;; first = 0) {
        const unsigned char *p = ps->p;
        if (p >= ps->end) return -1;
        if (*p == ']' && !first) break;
        if (p + 1 < ps->end && (*p == '&' || *p == '-' || *p == '~') && p[1] == *p) return -1;
        int lo = rx_class_atom(ps, &s, flags), hi = lo;
        if (lo == -1 || ps->p >= ps->end) return -1;
        /* a leading ']' stands alone; a '-' before ']' is itself, elsewhere it makes a range */
        if (!(first && *p == ']') && *ps->p == '-' && ps->p + 1 < ps->end && ps->p[1] != ']') {
            if (lo < 0 || ps->p[1] == '-') return -1;
            ps->p++;
            if ((hi = rx_class_atom(ps, &s, flags)) < lo) return -1;
        }
        for (int c = lo; c >= 0 && c <= hi; c++) rx_add(&s, c);
    }
    ps->p++;
    return neg && (flags & RXF_ASCII) ? -1 : rx_char(ps, s, flags, neg);
}

/* An escape outside a class, ps->p just past the backslash. Rust refuses \D \W \S under (?-u),
 * where they could match a byte of invalid UTF-8. */
static int rx_escape(RxParser *ps, unsigned flags) {
    static const char asserts[] = "bBAz<>";
    static const int kinds[] = {RX_WORD_B,     RX_NOT_WORD_B, RX_TEXT_START,
                                RX_TEXT_END,   RX_WORD_START, RX_WORD_END};
    RxSet s = {{0}};
    if (ps->p >= ps->end) return -1;
    int c = *ps->p;
    const char *k = c ? strchr(asserts, c) : NULL;
    if (rx_perl(c, &s)) {
        ps->p++;
        return (flags & RXF_ASCII) && c < 'a' ? -1 : rx_char(ps, s, 0, 0);
    }
    if (k && ++ps->p < ps->end && c == 'b' && *ps->p == '{') return -1; /* \b{start}, ... */
    if (k) return rx_assert(ps, kinds[k - asserts]);
    if ((c = rx_escape_char(ps)) < 0) return -1;
    rx_add(&s, c);
    return rx_char(ps, s, flags, 0);
}

/* The flags of "(?flags)" or "(?flags:" into *flags, ps->p just past the '?': returns the ')' or
 * ':' that ends them, or -1 for what Rust refuses ((?), (?-), (?ii)) and for the x and R flags,
 * named groups and look-around, which are not supported. */
static int rx_flags(RxParser *ps, unsigned *flags) {
    unsigned seen = 0;
    int neg = 0, last = 0;
    while (ps->p < ps->end) {
        int c = *ps->p++;
        if (c == ':' || c == ')') return last == '-' || (c == ')' && !last) ? -1 : c;
        if (c == '-') {
            if (neg) return -1;
            neg = 1;
        } else {
            unsigned bit = c == 'i' ? RXF_I : c == 'm' ? RXF_M : c == 's' ? RXF_S
                         : c == 'u' ? RXF_ASCII : c == 'U' ? RXF_UNGREEDY : 0;
            if (!bit || (seen & bit)) return -1;
            seen |= bit; /* RXF_ASCII is u turned off: -u sets it, u clears it */
            if (neg == (bit != RXF_ASCII)) *flags &= ~bit;
            else *flags |= bit;
        }
        last = c;
    }
    return -1;
}

static int rx_alt(RxParser *ps, unsigned flags);

/* A group, ps->p just past the '('; 0 for a bare (?flags), which sets the flags of the enclosing
 * group from there to its end, across '|' too, as in Rust. */
static int rx_group(RxParser *ps, unsigned *flags) {
    unsigned inner = *flags;
    if (ps->p < ps->end && *ps->p == '?') {
        ps->p++;
        int end = rx_flags(ps, &inner);
        if (end < 0) return -1;
        if (end == ')') return *flags = inner, 0;
    }
    if (++ps->depth > RX_MAX_DEPTH || rx_alt(ps, inner) < 0 || ps->p >= ps->end || *ps->p++ != ')')
        return -1;
    ps->depth--;
    return 1;
}

/* One atom: 1 once its code is out, 0 for a (?flags), which has none, -1 on error. */
static int rx_atom(RxParser *ps, unsigned *flags) {
    RxSet s = {{0}};
    int c = *ps->p++;
    switch (c) {
    case '(': return rx_group(ps, flags);
    case '[': return rx_class(ps, *flags);
    case '\\': return rx_escape(ps, *flags);
    case '^': return rx_assert(ps, *flags & RXF_M ? RX_LINE_START : RX_TEXT_START);
    case '$': return rx_assert(ps, *flags & RXF_M ? RX_LINE_END : RX_TEXT_END);
    case '.': /* any byte but '\n', which (?s) lets in too; Rust refuses it under (?-u) */
        if (*flags & RXF_ASCII) return -1;
        if (!(*flags & RXF_S)) rx_add(&s, '\n');
        return rx_char(ps, s, 0, 1);
    case '*': case '+': case '?': case '{': return -1; /* a quantifier with nothing to repeat */
    }
    if (c >= 0x80) return -1;
    rx_add(&s, c);
    return rx_char(ps, s, *flags, 0);
}

/* A count of {m,n}: digits only (Rust also takes spaces), at most RX_MAX_REPEAT. */
static int rx_count(RxParser *ps) {
    int v = 0, digits = 0;
    for (; ps->p < ps->end && rx_isdigit(*ps->p); ps->p++, digits++)
        if ((v = v * 10 + (*ps->p - '0')) > RX_MAX_REPEAT) return -1;
    return digits ? v : -1;
}

/* The quantifiers after the atom whose code is prog[at:], each over the code of the one before
 * (Rust takes a** and a{2}{3}). The code is taken out and written back min times, then max - min
 * times behind a SPLIT that may skip to the end, or once in a loop. A lazy '?' is skipped: it
 * changes which match is found, not whether there is one. */
static int rx_quant(RxParser *ps, int at) {
    while (ps->p < ps->end && *ps->p && strchr("*+?{", *ps->p)) {
        int c = *ps->p++, min = c == '+', max = c == '?' ? 1 : -1, len = ps->n - at, ok = 1;
        if (c == '{') {
            if ((min = max = rx_count(ps)) < 0) return -1;
            if (ps->p < ps->end && *ps->p == ',') {
                if (++ps->p < ps->end && *ps->p == '}') max = -1;
                else if ((max = rx_count(ps)) < min) return -1;
            }
            if (ps->p >= ps->end || *ps->p++ != '}') return -1;
        }
        ps->p += ps->p < ps->end && *ps->p == '?';
        RxInst *code = (RxInst *)malloc(sizeof(RxInst) * (size_t)(len + 1));
        if (!code) return -1;
        memcpy(code, ps->prog + at, sizeof(RxInst) * (size_t)len);
        ps->n = at;
        for (int i = 0; i < min && ok; i++) ok = rx_copy(ps, code, len);
        if (max < 0) /* L: SPLIT L+1, end; code; JMP L */
            ok = ok && rx_emit(ps, RX_SPLIT, 0, 1, len + 2) > 0 && rx_copy(ps, code, len) &&
                 rx_emit(ps, RX_JMP, 0, -len - 1, 0) > 0;
        for (int i = min; i < max && ok; i++) /* SPLIT +1, end; code */
            ok = rx_emit(ps, RX_SPLIT, 0, 1, (max - i) * (len + 1)) > 0 && rx_copy(ps, code, len);
        free(code);
        if (!ok) return -1;
    }
    return 0;
}

/* Branches separated by '|', up to ')' or the end, under the flags of their group. Each branch
 * starts with a JMP to the next instruction, made a SPLIT (to the branch or the next one) if
 * another branch follows, and all but the last end with a JMP to the end, chained through x
 * until the end is known. */
static int rx_alt(RxParser *ps, unsigned flags) {
    int jumps = -1;
    for (;;) {
        int split = ps->n;
        if (rx_emit(ps, RX_JMP, 0, 1, 0) < 0) return -1;
        while (ps->p < ps->end && *ps->p != '|' && *ps->p != ')') {
            int at = ps->n, r = rx_atom(ps, &flags); /* (?flags) sets flags for what follows */
            if (r < 0 || (r > 0 && rx_quant(ps, at) < 0)) return -1;
        }
        if (ps->p >= ps->end || *ps->p != '|') break;
        ps->p++;
        if (rx_emit(ps, RX_JMP, 0, jumps, 0) < 0) return -1;
        jumps = ps->n - 1;
        ps->prog[split].op = RX_SPLIT, ps->prog[split].y = ps->n - split;
    }
    for (int next; jumps >= 0; jumps = next)
        next = ps->prog[jumps].x, ps->prog[jumps].x = ps->n - jumps;
    return 0;
}

/* What the DFA is built from. A state is the facts about the byte before it and its kernel: the
 * set of NFA pcs its threads wait at for the next byte (in pool, in no order: the hash is a sum,
 * so nothing is sorted). The unanchored search's thread at pc 0, in every state, is left out of
 * the kernels: its steps depend only on (facts, byte class), so they are worked out once each,
 * in start, which also keeps the transition for when the kernel adds nothing (the usual case). */
typedef struct { int ofs, len; unsigned facts; } RxState;
typedef struct { int ofs, len, done, known; uint32_t to; } RxStart; /* done: 1 + matched */
typedef struct {
    const RxInst *prog;
    const RxSet *set;
    uint32_t *mark, gen, *omark, ogen; /* pcs visited by this closure, put in out by this step */
    int *stack, *chars, *out, nout, *pool, npool, cappool, *hash, nstate, capstate, rep[256];
    unsigned used; /* the facts that the assertions read: others would only multiply states */
    RxState *state;
    RxStart *start;
    long work;
} RxBuild;

static int rx_holds(int kind, unsigned facts, int next) {
    int pw = (facts & RX_AFTER_WORD) != 0, nw = next >= 0 && rx_isword(next);
    switch (kind) {
    case RX_TEXT_START: return (facts & RX_AT_START) != 0;
    case RX_TEXT_END: return next < 0; /* not before a final '\n' either, unlike Perl's */
    case RX_LINE_START: return (facts & RX_AFTER_NL) != 0;
    case RX_LINE_END: return next < 0 || next == '\n';
    case RX_WORD_B: return pw != nw;
    case RX_NOT_WORD_B: return pw == nw;
    case RX_WORD_START: return !pw && nw;
    default: return pw && !nw; /* RX_WORD_END */
    }
}

/* Follows the threads at pcs[0:n] through splits, jumps and the assertions that hold between
 * the byte before (facts) and byte next (-1: the end of the text), listing the byte instructions
 * they reach in chars[0:*nchars]. 1 if a thread reaches MATCH: a match ends before next. Only
 * whether next is a word byte, '\n' or the end matters, so a state needs four of these at most. */
static int rx_close(RxBuild *b, const int *pcs, int n, unsigned facts, int next, int *chars,
                    int *nchars) {
    int sp = 0, matched = 0;
    b->gen++, *nchars = 0;
    for (int i = 0; i < n; i++)
        if (b->mark[pcs[i]] != b->gen) b->mark[pcs[i]] = b->gen, b->stack[sp++] = pcs[i];
    while (sp > 0) {
        int pc = b->stack[--sp], to[2] = {-1, -1};
        const RxInst *in = &b->prog[pc];
        b->work++;
        if (in->op == RX_MATCH) matched = 1;
        if (in->op == RX_CHAR) chars[(*nchars)++] = pc;
        if (in->op == RX_JMP || in->op == RX_SPLIT) to[0] = pc + in->x;
        if (in->op == RX_SPLIT) to[1] = pc + in->y;
        if (in->op == RX_ASSERT && rx_holds(in->kind, facts, next)) to[0] = pc + 1;
        for (int k = 0; k < 2; k++)
            if (to[k] >= 0 && b->mark[to[k]] != b->gen)
                b->mark[to[k]] = b->gen, b->stack[sp++] = to[k];
    }
    return matched;
}

/* Adds to out the pc after each of the byte instructions chars[0:n] that takes byte next. */
static void rx_step(RxBuild *b, const int *chars, int n, int next) {
    b->work += n;
    for (int i = 0; i < n; i++) {
        int pc = chars[i];
        if (next >= 0 && rx_has(&b->set[b->prog[pc].x], next) && b->omark[pc + 1] != b->ogen)
            b->omark[pc + 1] = b->ogen, b->out[b->nout++] = pc + 1;
    }
}

/* Appends out to the pool; its offset there, or -1 on out of memory. */
static int rx_pool(RxBuild *b) {
    int *pool = (int *)rx_grow(b->pool, &b->cappool, b->npool + b->nout, sizeof(int));
    if (!pool) return -1;
    memcpy((b->pool = pool) + b->npool, b->out, sizeof(int) * (size_t)b->nout);
    b->npool += b->nout;
    return b->npool - b->nout;
}

/* The state for (facts, out), added (with its row in re->trans) if new; -1 past the limits. */
static int rx_state(RxBuild *b, Regex *re, unsigned facts) {
    uint32_t h = facts * 0x9e3779b9u, i, mask = 2 * RX_MAX_STATES - 1, stride = re->ncls + 1;
    int k, cap = b->capstate;
    for (k = 0; k < b->nout; k++) h += ((uint32_t)b->out[k] + 1) * 0x85ebca6bu ^ 0xc2b2ae35u;
    for (i = (h ^ h >> 15) & mask; b->hash[i]; i = (i + 1) & mask) {
        const RxState *s = &b->state[b->hash[i] - 1]; /* out is the pcs that omark marks */
        if (s->facts != facts || s->len != b->nout) continue;
        for (k = 0; k < s->len && b->omark[b->pool[s->ofs + k]] == b->ogen; k++) {}
        b->work += k;
        if (k == s->len) return b->hash[i] - 1;
    }
    RxState *state = b->nstate == RX_MAX_STATES
                         ? NULL
                         : (RxState *)rx_grow(b->state, &b->capstate, b->nstate + 1, sizeof *state);
    if (!state) return -1;
    b->state = state;
    size_t bytes = sizeof(uint32_t) * stride * (size_t)b->capstate;
    uint32_t *trans = cap == b->capstate ? re->trans : (uint32_t *)realloc(re->trans, bytes);
    if (!trans) return -1;
    re->trans = trans;
    RxState s = {rx_pool(b), b->nout, facts};
    if (s.ofs < 0) return -1;
    b->state[b->nstate] = s;
    b->hash[i] = b->nstate + 1;
    return b->nstate++;
}

/* Byte classes: the bytes that every set, the word bytes and '\n' treat alike share a column. */
static void rx_classes(RxBuild *b, Regex *re, int nset) {
    RxSet word = {{0}}, nl = {{0}};
    int map[512], n = 1;
    for (int c = 0; c < 128; c++)
        if (rx_isword(c)) rx_add(&word, c);
    rx_add(&nl, '\n');
    memset(re->cls, 0, sizeof re->cls);
    for (int i = -2; i < nset; i++) { /* split each class by whether the set holds its bytes */
        const RxSet *s = i == -2 ? &word : i == -1 ? &nl : &b->set[i];
        memset(map, -1, sizeof(int) * 2 * (size_t)n);
        n = 0;
        for (int c = 0; c < 256; c++) {
            int *to = &map[re->cls[c] * 2 + rx_has(s, c)];
            if (*to < 0) *to = n++;
            re->cls[c] = (uint8_t)*to;
        }
    }
    re->ncls = (uint32_t)n;
    for (int c = 255; c >= 0; c--) b->rep[re->cls[c]] = c;
}

/* Every state's row: per byte class, the next state's row offset or RX_MATCHED; in the last
 * column, RX_MATCHED if the text may end there. States are numbered as they are found, so the
 * loop reaches the ones it adds. size: the NFA's. */
static int rx_build(RxBuild *b, Regex *re, int size) {
    uint32_t stride = re->ncls + 1;
    int zero = 0;
    b->nout = 0;
    if (rx_state(b, re, (RX_AT_START | RX_AFTER_NL) & b->used) != 0) return 0;
    for (int s = 0; s < b->nstate; s++) {
        int nchars[4] = {-1, -1, -1, -1}, matched[4] = {0};
        unsigned facts = b->state[s].facts;
        for (uint32_t k = 0; k < stride; k++) {
            int next = k < re->ncls ? b->rep[k] : -1, m, alone;
            int type = next < 0 ? 3 : next == '\n' ? 2 : rx_isword(next);
            int *chars = b->chars + type * size, *pc0 = b->stack + size;
            RxStart *st = &b->start[facts * stride + k];
            if (!st->done) { /* pc 0's step, the same in every state with these facts */
                st->done = 1 + rx_close(b, &zero, 1, facts, next, pc0, &st->len);
                b->ogen++, b->nout = 0;
                rx_step(b, pc0, st->len, next);
                st->len = b->nout;
                if ((st->ofs = rx_pool(b)) < 0) return 0;
            }
            if (nchars[type] < 0)
                matched[type] = rx_close(b, b->pool + b->state[s].ofs, b->state[s].len, facts,
                                         next, chars, &nchars[type]);
            b->ogen++, b->nout = 0;
            rx_step(b, chars, nchars[type], next);
            if ((alone = !(m = matched[type]) && !b->nout) && st->known) {
                re->trans[s * stride + k] = st->to;
                continue;
            }
            m |= st->done == 2;
            b->work += st->len;
            for (int i = 0; i < st->len; i++) {
                int pc = b->pool[st->ofs + i];
                if (b->omark[pc] != b->ogen) b->omark[pc] = b->ogen, b->out[b->nout++] = pc;
            }
            uint32_t to = m ? RX_MATCHED : 0;
            if (!m && next >= 0) {
                unsigned after = (next == '\n' ? RX_AFTER_NL : 0) | (type == 1 ? RX_AFTER_WORD : 0);
                int t = rx_state(b, re, after & b->used);
                if (t < 0) return 0;
                to = (uint32_t)t * stride;
            }
            re->trans[s * stride + k] = to;
            if (alone) st->known = 1, st->to = to;
            if (b->work > RX_MAX_WORK) return 0;
        }
    }
    return 1;
}

static inline void regex_free(Regex *re) {
    if (re) free(re->trans), free(re);
}

/* Compiles pattern[0:n]; NULL for syntax outside the subset above or that Rust refuses, past
 * the limits above, or on out of memory. */
static inline Regex *regex_compile(const char *pattern, size_t n) {
    RxParser ps = {0};
    RxBuild b = {0};
    Regex *re = (Regex *)calloc(1, sizeof(Regex));
    int ok = 0;
    ps.p = (const unsigned char *)pattern, ps.end = ps.p + n;
    if (re && rx_alt(&ps, 0) == 0 && ps.p == ps.end && rx_emit(&ps, RX_MATCH, 0, 0, 0) > 0) {
        size_t size = (size_t)ps.n;
        b.prog = ps.prog, b.set = ps.set, b.used = ps.facts;
        rx_classes(&b, re, ps.nset);
        b.mark = (uint32_t *)calloc(size, sizeof(uint32_t));
        b.omark = (uint32_t *)calloc(size, sizeof(uint32_t));
        b.stack = (int *)malloc(2 * sizeof(int) * size); /* then pc 0's byte instructions */
        b.chars = (int *)malloc(4 * sizeof(int) * size);
        b.out = (int *)malloc(sizeof(int) * size);
        b.hash = (int *)calloc(2 * RX_MAX_STATES, sizeof(int));
        b.start = (RxStart *)calloc(8 * (re->ncls + 1), sizeof(RxStart));
        ok = b.mark && b.omark && b.stack && b.chars && b.out && b.hash && b.start &&
             rx_build(&b, re, ps.n);
    }
    free(ps.prog), free(ps.set), free(b.mark), free(b.omark), free(b.stack), free(b.chars);
    free(b.out), free(b.pool), free(b.hash), free(b.state), free(b.start);
    if (!ok) regex_free(re);
    return ok ? re : NULL;
}

/* 1 if re matches somewhere in text[0:n], else 0: one table step per byte. */
static inline int regex_search(const Regex *re, const char *text, size_t n) {
    const uint32_t *trans = re->trans;
    uint32_t s = 0;
    for (size_t i = 0; i < n; i++)
        if ((s = trans[s + re->cls[(unsigned char)text[i]]]) == RX_MATCHED) return 1;
    return trans[s + re->ncls] == RX_MATCHED;
}

#endif
