/* Arrow's string view, as the Kineto decoder (_eventdecode.c) writes it and its reduction
 * (_eventreduce.c) reads and writes it: 16 bytes, the length (int32), then the text itself when
 * it is VIEW_INLINE bytes or shorter, else its first 4 bytes, the index of its data buffer (int32;
 * 0 but in the assembly's columns, which gather rows of several chunks) and its offset in that
 * buffer (int32). */
#ifndef TRACEANALYZER_STRINGVIEW_H
#define TRACEANALYZER_STRINGVIEW_H

#include <stdint.h>
#include <string.h>

#define VIEW_INLINE 12

/* The view of the n bytes at p; a longer text's bytes lie at offset in data buffer 0. */
static inline void view_make(unsigned char view[16], const char *p, int32_t n, int32_t offset) {
    memset(view, 0, 16);
    memcpy(view, &n, 4);
    if (n <= VIEW_INLINE) {
        if (n > 0) memcpy(view + 4, p, (size_t)n); /* an empty text may have no bytes at all */
    } else {
        memcpy(view + 4, p, 4);
        memcpy(view + 12, &offset, 4);
    }
}

/* The text of a view, whose longer texts lie in data; its length in *n. */
static inline const char *view_text(const unsigned char *view, const char *data, int32_t *n) {
    int32_t offset;
    memcpy(n, view, 4);
    memcpy(&offset, view + 12, 4);
    return *n <= VIEW_INLINE ? (const char *)view + 4 : data + offset;
}

/* Whether each of ``rows`` views is inline or lies inside its data buffer: buffer k holds
 * lens[k] bytes, for k < n. Views that come from Python are checked with it before anything
 * reads the text they point to. */
static inline int views_within_buffers(const unsigned char *views, int64_t rows,
                                       const int64_t *lens, int64_t n) {
    for (int64_t i = 0; i < rows; i++) {
        const unsigned char *view = views + 16 * i;
        int32_t len, buffer, offset;
        memcpy(&len, view, 4);
        memcpy(&buffer, view + 8, 4);
        memcpy(&offset, view + 12, 4);
        if (len < 0 || (len > VIEW_INLINE &&
                        (buffer < 0 || buffer >= n || offset < 0 ||
                         (int64_t)offset + len > lens[buffer])))
            return 0;
    }
    return 1;
}

/* The same for views into one data buffer 0 of ``data_len`` bytes (-1: there is none). */
static inline int views_within(const unsigned char *views, int64_t rows, int64_t data_len) {
    return views_within_buffers(views, rows, &data_len, data_len < 0 ? 0 : 1);
}

#endif
