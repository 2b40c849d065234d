/* ASCII character classes, as the regexes of the Polars reference have them under (?-u:...), and
 * ASCII lowercasing: the compiled reduction (_eventreduce.c) and assembly (_eventassemble.c) use
 * them where the reference lowercases or matches text that they checked to be ASCII. */
#ifndef TRACEANALYZER_ASCII_H
#define TRACEANALYZER_ASCII_H

#include <stdint.h>

static inline char ascii_lower(char c) { return c >= 'A' && c <= 'Z' ? (char)(c + 32) : c; }

/* The regex class (?-u:\w). */
static inline int ascii_word(char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

/* Whether the n bytes at p are all ASCII (else Unicode lowercasing could differ). */
static inline int ascii_only(const char *p, int64_t n) {
    for (int64_t k = 0; k < n; k++)
        if ((unsigned char)p[k] >= 0x80) return 0;
    return 1;
}

#endif
