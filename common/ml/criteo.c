/* criteo.c - the Criteo-layout line parser and the streaming reader (see criteo.h).
 *
 * DESIGN: three parsers, each taking what the one before cannot: eight fields per instruction
 * (parse_vector, on processors with AVX-512 VBMI2: the usual line, all fields of at most 8
 * bytes), one pass a field after the other (parse_fast: numbers of up to 18 digits), and field
 * by field (which accepts the same lines plus a few rare forms, "+8", 19-digit numbers, and
 * says what is wrong with a bad one). The reader keeps one buffer of PF_CRITEO_BUFFER +
 * max_line bytes. zlib's gzread (which reads plain files as they are) fills it; each line is
 * found (by the vector parser's own scan, else memchr) and parsed in place, and what is left
 * of a line cut by the buffer's end moves to the front before the next read. A line that does not
 * fit in max_line is an error, never a bigger buffer, so memory is the same for a 1 KB file and a 1
 * TB one. After that error the rest of the long line is read past without keeping it, so the caller
 * may skip it and go on.
 */
#include "psflow/criteo.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "psflow/mem.h"

/* --- one line ------------------------------------------------------------------------------ */

const char *pf_criteo_column_name(int column) {
    static const char *const names[PF_CRITEO_FIELDS] = {
        "label", "I1",  "I2",  "I3",  "I4",  "I5",  "I6",  "I7",  "I8",  "I9",
        "I10",   "I11", "I12", "I13", "C1",  "C2",  "C3",  "C4",  "C5",  "C6",
        "C7",    "C8",  "C9",  "C10", "C11", "C12", "C13", "C14", "C15", "C16",
        "C17",   "C18", "C19", "C20", "C21", "C22", "C23", "C24", "C25", "C26"};
    if (column == PF_CRITEO_FIELDS)
        return "after C26"; /* a field too many */
    return column >= 0 && column < PF_CRITEO_FIELDS ? names[column] : "line";
}

/* A decimal integer of int64 range in f[0..n). 0, or -1 with why set. */
static int parse_int(const char *f, size_t n, int64_t *out, char *why, size_t why_len) {
    size_t i = 0;
    int neg = 0;
    if (n > 0 && (f[0] == '-' || f[0] == '+')) {
        neg = f[0] == '-';
        i = 1;
    }
    if (i == n) {
        snprintf(why, why_len, "'%.*s' is not an integer", (int)(n < 40 ? n : 40), f);
        return -1;
    }
    uint64_t v = 0;
    const uint64_t limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (; i < n; i++) {
        unsigned d = (unsigned)(unsigned char)f[i] - '0';
        if (d > 9) {
            snprintf(why, why_len, "'%.*s' is not an integer", (int)(n < 40 ? n : 40), f);
            return -1;
        }
        if (v > (limit - d) / 10) {
            snprintf(why, why_len, "'%.*s' overflows a 64-bit integer", (int)(n < 40 ? n : 40), f);
            return -1;
        }
        v = v * 10 + d;
    }
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 0;
}

/* A hex id of 1 to 8 digits in f[0..n). 0, or -1 with why set. */
static int parse_id(const char *f, size_t n, uint32_t *out, char *why, size_t why_len) {
    if (n > 8) {
        snprintf(why, why_len, "'%.*s' is longer than a 32-bit id (8 hex digits)",
                 (int)(n < 40 ? n : 40), f);
        return -1;
    }
    uint32_t v = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned c = (unsigned char)f[i], d;
        if (c - '0' < 10)
            d = c - '0';
        else if ((c | 0x20) - 'a' < 6)
            d = (c | 0x20) - 'a' + 10;
        else {
            snprintf(why, why_len, "'%.*s' is not a hex id", (int)n, f);
            return -1;
        }
        v = v << 4 | d;
    }
    *out = v;
    return 0;
}

/* 1 + the value of a hex digit, 0 for any other byte: a table rather than comparisons, as
 * an id's digits and letters come in no order a branch could predict. */
static const uint8_t hex1[256] = {
    ['0'] = 1,  ['1'] = 2,  ['2'] = 3,  ['3'] = 4,  ['4'] = 5,  ['5'] = 6,  ['6'] = 7,  ['7'] = 8,
    ['8'] = 9,  ['9'] = 10, ['a'] = 11, ['b'] = 12, ['c'] = 13, ['d'] = 14, ['e'] = 15, ['f'] = 16,
    ['A'] = 11, ['B'] = 12, ['C'] = 13, ['D'] = 14, ['E'] = 15, ['F'] = 16};

/* --- eight bytes at a time (SWAR) ---
 * A field is read as one 64-bit word: where its tab is, whether its bytes are digits and
 * their value come from a few arithmetic steps on the word, with no branch that depends on
 * the digits, so a line costs no mispredicted branches per field. Used where at least 16
 * bytes of the line are left (a word and the byte after it are inside the line); the bytes
 * of a word are numbered from the lowest, so the first character is byte 0 on any host
 * (load8 reads them in that order). */

#define ONES  0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

static inline uint64_t load8(const char *p) {
    const unsigned char *u = (const unsigned char *)p;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint64_t w;
    memcpy(&w, u, 8);
    return w;
#else
    uint64_t w = 0;
    for (int i = 7; i >= 0; i--)
        w = w << 8 | u[i];
    return w;
#endif
}

/* The number of bytes of w before its first tab (8: none). */
static inline unsigned before_tab(uint64_t w) {
    uint64_t x = w ^ (ONES * '\t');
    uint64_t tabs = (x - ONES) & ~x & HIGHS; /* exact up to the first tab, which is enough */
    return tabs ? (unsigned)__builtin_ctzll(tabs) >> 3 : 8;
}

/* The high bit of each byte of w in [lo, hi] (bytes below 0x80 only; others give garbage
 * for the bytes above them, which callers reject anyway). */
static inline uint64_t in_range(uint64_t w, unsigned lo, unsigned hi) {
    return (w + ONES * (0x80 - lo)) & ~(w + ONES * (0x80 - (hi + 1))) & ~w & HIGHS;
}

/* The low n bytes (n in 0..8). */
static inline uint64_t low_bytes(unsigned n) {
    return n ? ~0ULL >> (64 - 8 * n) : 0;
}

/* An integer field at p (an optional '-', 0 to 7 digits, a tab), at least 16 bytes before
 * the line's end: 1 with *v and *present set and *next after the tab, 0 for anything else
 * (8 digits or more, a "+", a bad byte), which the byte-by-byte loop then reads. */
static inline int swar_int(const char *p, int64_t *v, int *present, const char **next) {
    int neg = *p == '-';
    uint64_t w = load8(p + neg);
    unsigned n = before_tab(w);
    uint64_t keep = low_bytes(n);
    if (n == 8 || (in_range(w, '0', '9') & keep) != (keep & HIGHS) || (n == 0 && neg))
        return 0;
    /* the digits' values moved to the top bytes, leading zeros below: eight digits */
    uint64_t d = n ? (w & keep & (ONES * 0x0F)) << (8 * (8 - n)) : 0;
    d = (d * 10 + (d >> 8)) & 0x00FF00FF00FF00FFULL;
    d = (d * 100 + (d >> 16)) & 0x0000FFFF0000FFFFULL;
    d = (d * 10000 + (d >> 32)) & 0xFFFFFFFFULL;
    *v = n ? (neg ? -(int64_t)d : (int64_t)d) : *v; /* an absent value leaves *v as it was */
    *present = n > 0;
    *next = p + neg + n + 1;
    return 1;
}

/* An id field at p (0 to 8 hex digits, then a tab), at least 16 bytes before the line's
 * end: 1 with *v, *present and *next set, 0 for anything else. */
static inline int swar_id(const char *p, uint32_t *v, int *present, const char **next) {
    uint64_t w = load8(p);
    unsigned n = before_tab(w);
    uint64_t keep = low_bytes(n);
    uint64_t hex = in_range(w, '0', '9') | in_range(w | (ONES * 0x20), 'a', 'f');
    if (p[n] != '\t' || (hex & keep) != (keep & HIGHS))
        return 0;
    /* each digit's value (a letter: its low 4 bits + 9), first digit highest */
    uint64_t x = ((w & (ONES * 0x0F)) + ((w >> 6) & ONES) * 9) & keep;
    x = n ? __builtin_bswap64(x) >> (8 * (8 - n)) : 0;
    x = (x | x >> 4) & 0x00FF00FF00FF00FFULL;
    x = (x | x >> 8) & 0x0000FFFF0000FFFFULL;
    x = (x | x >> 16) & 0xFFFFFFFFULL;
    *v = n ? (uint32_t)x : *v;
    *present = n > 0;
    *next = p + n + 1;
    return 1;
}

/* The usual line in one pass: a label, 13 integers of at most 18 digits (no overflow
 * possible), 26 ids of at most 8 hex digits, tabs between them; each field a word at a time
 * where 16 bytes of the line are left, else byte by byte. Returns 0 with *row filled, or -1
 * for anything else (a bad line, a "+", 19 digits or more), which the careful parser below
 * then reads and, if it is bad, explains. */
static int parse_fast(const char *p, const char *end, pf_criteo_row *row) {
    if (end - p < 2 || (p[0] != '0' && p[0] != '1') || p[1] != '\t')
        return -1;
    row->label = p[0] - '0';
    p += 2;
    uint32_t num_present = 0, cat_present = 0;
    for (int j = 0; j < PF_CRITEO_NUMERIC; j++) {
        int present;
        const char *next;
        if (end - p >= 16 && swar_int(p, &row->num[j], &present, &next)) {
            num_present |= (uint32_t)present << j;
            p = next;
            continue;
        }
        int neg = p < end && *p == '-';
        p += neg;
        const char *digits = p;
        uint64_t v = 0;
        for (unsigned d; p < end && (d = (unsigned)(unsigned char)*p - '0') <= 9; p++)
            v = v * 10 + d;
        size_t n = (size_t)(p - digits);
        if (n > 18 || (n == 0 && neg) || p >= end || *p != '\t')
            return -1;
        if (n) {
            row->num[j] = neg ? -(int64_t)v : (int64_t)v;
            num_present |= 1u << j;
        }
        p++;
    }
    for (int c = 0; c < PF_CRITEO_CATEGORICAL; c++) {
        int last = c == PF_CRITEO_CATEGORICAL - 1, present;
        const char *next;
        if (!last && end - p >= 16 && swar_id(p, &row->cat[c], &present, &next)) {
            cat_present |= (uint32_t)present << c;
            p = next;
            continue;
        }
        const char *digits = p;
        uint32_t v = 0;
        for (unsigned d; p < end && (d = hex1[(unsigned char)*p]) != 0; p++)
            v = v << 4 | (d - 1);
        size_t n = (size_t)(p - digits);
        if (n > 8 || (last ? p != end : p >= end || *p != '\t'))
            return -1;
        if (n) {
            row->cat[c] = v;
            cat_present |= 1u << c;
        }
        p += !last;
    }
    row->num_present = num_present;
    row->cat_present = cat_present;
    return 0;
}

/* --- eight fields per instruction (x86-64 with AVX-512 VBMI2) ---
 * parse_fast reads the fields one after the other: each field's start comes from the field
 * before, a chain of 39 steps of a dozen instructions each. parse_vector finds the line's tabs
 * and its newline first (two compares and a compress per 64 bytes), then takes eight fields at
 * a time: each lane of a vector gets the 8 bytes that end at its field's tab (one byte
 * permutation over the 128 bytes where the eight fields lie), and the same instructions check
 * and convert all eight. It takes the lines parse_fast takes whose numbers have at most 8
 * characters, whose ids at most 8 digits and whose length is at most VECTOR_MAX; it gives any
 * other line to parse_fast, with the row's contents undefined. Compiled for the processors that
 * have the instructions and chosen at run time (pf_criteo_use_vector), so one binary runs
 * anywhere; the tests and the fuzz target check that both paths give the same rows. */

#if defined(__x86_64__) && defined(__GNUC__)
#define CRITEO_VECTOR 1
#define VECTOR_TARGET                                                                              \
    __attribute__((                                                                                \
        target("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi,avx512vbmi2,popcnt,bmi,bmi2")))
#define VECTOR_MAX    440 /* the longest line it takes (real ones are about 250 bytes) */
#define VECTOR_BLOCKS ((VECTOR_MAX + 1 + 63) / 64)
#define FIRST_BLOCKS  5 /* the blocks read before looking for the newline: real lines fit */
#define VECTOR_AT     (PF_CRITEO_FIELDS + 64) /* the tabs' positions, room for a whole block */
#define VECTOR_COPY   (64 + VECTOR_BLOCKS * 64 + 128) /* a line copied, with room on each side */
#else
#define CRITEO_VECTOR 0
#endif

#if CRITEO_VECTOR

/* Each lane holds the 8 bytes that end where its field ends, so a field of n bytes (n <= 8)
 * is the lane's high n bytes, its last digit the lowest of its value: no lane needs a shift
 * of its own; n is in every byte of its lane. A field with something wrong sets bits in the
 * returned mask (which only says that the line goes to parse_fast); `in` has the bytes of
 * the lanes in use. */

/* The bytes of the lanes that belong to their field: the high n of each lane. */
VECTOR_TARGET static inline __mmask64 field_bytes(__m512i n, __mmask64 in) {
    const __m512i need = _mm512_set1_epi64(0x0102030405060708LL); /* byte j kept if n >= 8 - j */
    return _mm512_mask_cmpge_epu8_mask(in, n, need);
}

/* Integers (an optional '-' and digits, 1 to 8 characters in all, or nothing). */
VECTOR_TARGET static inline uint64_t vector_ints(__m512i w, __m512i n, __mmask8 lanes, __mmask64 in,
                                                 int64_t *num, uint32_t *present) {
    const __m512i need = _mm512_set1_epi64(0x0102030405060708LL); /* as in field_bytes */
    uint64_t bad = 0;
    __mmask64 kept = field_bytes(n, in);
    __mmask64 minus = _mm512_mask_cmpeq_epi8_mask(kept, w, _mm512_set1_epi8('-'));
    __mmask64 first = _mm512_cmpeq_epi8_mask(n, need); /* each field's first byte */
    __m512i d = _mm512_sub_epi8(w, _mm512_set1_epi8('0'));
    __mmask64 digits = kept & ~minus;
    bad |= (minus & ~first) | (digits & ~_mm512_cmplt_epu8_mask(d, _mm512_set1_epi8(10)));
    __mmask8 neg = _mm512_test_epi64_mask(_mm512_maskz_mov_epi8(minus, _mm512_set1_epi8(1)),
                                          _mm512_set1_epi8(1));
    bad |= neg & _mm512_cmpeq_epi64_mask(n, _mm512_set1_epi8(1)); /* "-" alone */
    d = _mm512_maskz_mov_epi8(digits, d);
    d = _mm512_maddubs_epi16(d, _mm512_set1_epi16(0x010A)); /* pairs, fours, eights of digits */
    d = _mm512_madd_epi16(d, _mm512_set1_epi32(0x00010064));
    d = _mm512_add_epi64(_mm512_mul_epu32(d, _mm512_set1_epi64(10000)), _mm512_srli_epi64(d, 32));
    d = _mm512_mask_sub_epi64(d, neg, _mm512_setzero_si512(), d);
    __mmask8 has = _mm512_mask_test_epi64_mask(lanes, n, n);
    _mm512_mask_storeu_epi64(num, has, d);
    *present = has;
    return bad;
}

/* Ids (1 to 8 hex digits, or nothing); hex1's first 128 bytes in table_lo:table_hi. */
VECTOR_TARGET static inline uint64_t vector_ids(__m512i w, __m512i n, __mmask8 lanes, __mmask64 in,
                                                __m512i table_lo, __m512i table_hi, uint32_t *cat,
                                                uint32_t *present) {
    __mmask64 kept = field_bytes(n, in);
    uint64_t bad = 0;
    __m512i x = _mm512_permutex2var_epi8(table_lo, w, table_hi); /* 1 + value, 0: not hex */
    bad |= kept & (_mm512_testn_epi8_mask(x, x) | _mm512_movepi8_mask(w));
    x = _mm512_maskz_sub_epi8(kept, x, _mm512_set1_epi8(1));
    x = _mm512_maddubs_epi16(x, _mm512_set1_epi16(0x0110));  /* first digit * 16 + second */
    x = _mm512_madd_epi16(x, _mm512_set1_epi32(0x00010100)); /* first pair * 256 + second */
    /* the lane's two 16-bit halves, first half high */
    x = _mm512_shuffle_epi8(
        x, _mm512_set4_epi32((int)0x80808080, 0x09080D0C, (int)0x80808080, 0x01000504));
    __mmask8 has = _mm512_mask_test_epi64_mask(lanes, n, n);
    _mm256_mask_storeu_epi32(cat, has, _mm512_cvtepi64_epi32(x));
    *present = has;
    return bad;
}

/* Finds the tabs of the line at p: with b, the n bytes at p are the line, copied to b + 64 (b
 * has VECTOR_COPY bytes) for the fields to be read there; without, the line is the n bytes or
 * fewer at p up to the first newline, and the caller has READER_PAD bytes readable on either
 * side of p's n. 0 with the positions of the 39 tabs and of the line's end, modulo 256, in
 * at[0..39] (at has VECTOR_AT bytes, the rest scratch; read_fields tells the true positions
 * from them) and the line's length in *len; -1 for a line that
 * does not have 40 fields or no end within VECTOR_MAX bytes. */
VECTOR_TARGET static inline __attribute__((always_inline)) int
index_line(const char *p, size_t n, unsigned char *b, unsigned char *at, size_t *len) {
    int bounded = b != NULL;
    if (n < 2 || (bounded && n > VECTOR_MAX))
        return -1;
    if (bounded)
        _mm512_store_si512((void *)b, _mm512_setzero_si512());
    const __m512i iota = _mm512_set_epi8(
        63, 62, 61, 60, 59, 58, 57, 56, 55, 54, 53, 52, 51, 50, 49, 48, 47, 46, 45, 44, 43, 42, 41,
        40, 39, 38, 37, 36, 35, 34, 33, 32, 31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18,
        17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    unsigned k = 0, i = 0;
    size_t end = 0;
    if (!bounded && n >= 64 * FIRST_BLOCKS) { /* the usual line: its newline in 320 bytes */
        const __m512i tab = _mm512_set1_epi8('\t'), newline = _mm512_set1_epi8('\n');
        uint64_t t[FIRST_BLOCKS], e[FIRST_BLOCKS];
        unsigned with = 0; /* bit j: a newline in block j */
        for (int j = 0; j < FIRST_BLOCKS; j++) {
            __m512i v = _mm512_loadu_si512((const void *)(p + 64 * j));
            t[j] = _mm512_cmpeq_epi8_mask(v, tab);
            uint64_t nl = _mm512_cmpeq_epi8_mask(v, newline);
            e[j] = _tzcnt_u64(nl);
            with |= (unsigned)(nl != 0) << j;
        }
        if (with) {
            unsigned last = (unsigned)__builtin_ctz(with);
            end = 64 * (size_t)last + e[last];
            unsigned offset[FIRST_BLOCKS];
            for (unsigned j = 0; j < FIRST_BLOCKS; j++) { /* the tabs before the end, the end */
                uint64_t before = j < last ? 64 : j == last ? e[last] : 0;
                t[j] = _bzhi_u64(t[j], (unsigned)before) | (uint64_t)(j == last) << (e[last] & 63);
                offset[j] = k;
                k += (unsigned)_mm_popcnt_u64(t[j]);
            }
            if (k != PF_CRITEO_FIELDS)
                return -1;
            for (unsigned j = 0; j < FIRST_BLOCKS; j++)
                _mm512_storeu_si512((void *)(at + offset[j]),
                                    _mm512_add_epi8(_mm512_maskz_compress_epi8(t[j], iota),
                                                    _mm512_set1_epi8((char)(64 * j))));
            goto indexed;
        }
    }
    for (;; i++) {
        if (i == VECTOR_BLOCKS || (size_t)64 * i > n - !bounded)
            return -1;                                                   /* no end seen */
        size_t left = n - (size_t)64 * i < 64 ? n - (size_t)64 * i : 64; /* bytes to read */
        __mmask64 in = left == 64 ? ~0ULL : (1ULL << left) - 1;
        __m512i v = _mm512_maskz_loadu_epi8(in, p + 64 * i); /* nothing read past n */
        if (bounded)
            _mm512_store_si512((void *)(b + 64 + 64 * i), v);
        __mmask64 m = _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8('\t'));
        __mmask64 stop = bounded ? (left < 64 ? 1ULL << left : 0)
                                 : _mm512_mask_cmpeq_epi8_mask(in, v, _mm512_set1_epi8('\n'));
        if (stop) { /* the line ends here: a tab there ends the last field */
            unsigned e = (unsigned)__builtin_ctzll(stop);
            m = (m & ((1ULL << e) - 1)) | 1ULL << e;
            end = (size_t)64 * i + e;
        }
        unsigned count = (unsigned)__builtin_popcountll(m);
        if (k + count > PF_CRITEO_FIELDS)
            return -1;
        _mm512_storeu_si512((void *)(at + k), _mm512_add_epi8(_mm512_maskz_compress_epi8(m, iota),
                                                              _mm512_set1_epi8((char)(64 * i))));
        k += count;
        if (stop)
            break;
    }
    if (end > VECTOR_MAX)
        return -1;
indexed:
    *len = end;
    return k == PF_CRITEO_FIELDS ? 0 : -1;
}

/* The fields of the line at src, of len bytes, whose tabs index_line found: 0 with *row
 * filled, or -1 for a line parse_fast is to read (a bad field, a field of over 8 bytes),
 * *row then undefined. src has READER_PAD readable bytes on either side of the line. */
VECTOR_TARGET static inline __attribute__((always_inline)) int
read_fields(const char *src, const unsigned char *at, size_t len, pf_criteo_row *row) {
    if (at[0] != 1 || (src[0] != '0' && src[0] != '1'))
        return -1;
    /* the length of every field, at[f] - at[f - 1] - 1 for f = 1..39 (modulo 256) */
    __m512i pos = _mm512_loadu_si512((const void *)at);
    __m512i size = _mm512_sub_epi8(_mm512_sub_epi8(_mm512_loadu_si512((const void *)(at + 1)), pos),
                                   _mm512_set1_epi8(1));
    if (_mm512_mask_cmpgt_epu8_mask((1ULL << 39) - 1, size, _mm512_set1_epi8(8)))
        return -1; /* a field over 8 bytes (or 256 and more over): parse_fast's */
    /* the true positions of the tabs before each group of eight, each from the one before:
     * a field of 256 bytes or more between them would make the last differ from the end */
    size_t t1 = 1 + (uint8_t)(at[1] - 1), t9 = t1 + (uint8_t)(at[9] - at[1]);
    size_t t14 = t9 + (uint8_t)(at[14] - at[9]), t22 = t14 + (uint8_t)(at[22] - at[14]);
    size_t t30 = t22 + (uint8_t)(at[30] - at[22]), t38 = t30 + (uint8_t)(at[38] - at[30]);
    if (t38 + (uint8_t)(at[39] - at[38]) != len)
        return -1;

    /* eight fields from f: lane L gets, in each of its bytes, byte f + L - 1 of the lengths
     * (the length of field f + L) or byte f + L of the positions (the tab after it, whose
     * distance from the group's first tab, at most 72, is that of the positions modulo 256) */
    uint64_t bad = 0;
    uint32_t num_present = 0, cat_present = 0, got;
    const __m512i table_lo = _mm512_loadu_si512((const void *)hex1);
    const __m512i table_hi = _mm512_loadu_si512((const void *)(hex1 + 64));
    const __m512i ladder = _mm512_set_epi64(
        0x0707070707070707LL, 0x0606060606060606LL, 0x0505050505050505LL, 0x0404040404040404LL,
        0x0303030303030303LL, 0x0202020202020202LL, 0x0101010101010101LL, 0);
    const __m512i ramp = _mm512_set1_epi64(0x0706050403020100LL);
#define FIELDS(f, lanes, w, n)                                                                     \
    __m512i n =                                                                                    \
        _mm512_permutexvar_epi8(_mm512_add_epi8(ladder, _mm512_set1_epi8((char)((f)-1))), size);   \
    const char *from_##w = src + t##f - 8;                                                         \
    __m512i w = _mm512_permutex2var_epi8(                                                          \
        _mm512_loadu_si512((const void *)from_##w),                                                \
        _mm512_add_epi8(                                                                           \
            _mm512_permutexvar_epi8(_mm512_add_epi8(ladder, _mm512_set1_epi8((char)(f))), pos),    \
            _mm512_sub_epi8(ramp, _mm512_set1_epi8((char)at[f]))),                                 \
        _mm512_loadu_si512((const void *)(from_##w + 64)))
    FIELDS(1, 0xFF, w1, n1);
    bad |= vector_ints(w1, n1, 0xFF, ~0ULL, row->num, &got);
    num_present = got;
    FIELDS(9, 0x1F, w2, n2);
    bad |= vector_ints(w2, n2, 0x1F, 0xFFFFFFFFFFULL, row->num + 8, &got);
    num_present |= got << 8;
    FIELDS(14, 0xFF, w3, n3);
    bad |= vector_ids(w3, n3, 0xFF, ~0ULL, table_lo, table_hi, row->cat, &got);
    cat_present = got;
    FIELDS(22, 0xFF, w4, n4);
    bad |= vector_ids(w4, n4, 0xFF, ~0ULL, table_lo, table_hi, row->cat + 8, &got);
    cat_present |= got << 8;
    FIELDS(30, 0xFF, w5, n5);
    bad |= vector_ids(w5, n5, 0xFF, ~0ULL, table_lo, table_hi, row->cat + 16, &got);
    cat_present |= got << 16;
    FIELDS(38, 0x03, w6, n6);
    bad |= vector_ids(w6, n6, 0x03, 0xFFFFULL, table_lo, table_hi, row->cat + 24, &got);
    cat_present |= got << 24;
#undef FIELDS
    if (bad)
        return -1;
    row->label = src[0] - '0';
    row->num_present = num_present;
    row->cat_present = cat_present;
    return 0;
}

/* One line of len bytes (no newline), as pf_criteo_parse_line has it. */
VECTOR_TARGET static int parse_vector(const char *line, size_t len, pf_criteo_row *row) {
    _Alignas(64) unsigned char b[VECTOR_COPY];
    unsigned char at[VECTOR_AT];
    size_t same;
    if (index_line(line, len, b, at, &same) != 0)
        return -1;
    return read_fields((const char *)b + 64, at, len, row);
}

/* Whether this processor has what parse_vector needs. */
static int vector_supported(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512vbmi2") &&
           __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2") &&
           __builtin_cpu_supports("popcnt");
}
#endif

/* -1 until first asked; then whether parse_vector is used. Set once from the processor and
 * PSFLOW_CRITEO_VECTOR (0: off); any thread that sets it first sets the same value. */
static int vector_on = -1;

static int vector_usable(void) {
    int on = __atomic_load_n(&vector_on, __ATOMIC_RELAXED);
    if (on < 0) {
        const char *env = getenv("PSFLOW_CRITEO_VECTOR");
        on = pf_criteo_use_vector(!(env && strcmp(env, "0") == 0));
    }
    return on;
}

int pf_criteo_use_vector(int on) {
#if CRITEO_VECTOR
    on = on && vector_supported();
#else
    on = 0;
#endif
    __atomic_store_n(&vector_on, on, __ATOMIC_RELAXED);
    return on;
}

pf_status pf_criteo_parse_line(const char *line, size_t len, pf_criteo_row *row, int *column,
                               char *why, size_t why_len) {
    if (len > 0 && line[len - 1] == '\r')
        len--;
#if CRITEO_VECTOR
    if (vector_usable() && parse_vector(line, len, row) == 0) {
        *column = -1;
        return PF_OK;
    }
#endif
    if (parse_fast(line, line + len, row) == 0) {
        *column = -1;
        return PF_OK;
    }
    row->num_present = row->cat_present = 0;
    const char *p = line, *end = line + len;
    for (int col = 0; col < PF_CRITEO_FIELDS; col++) {
        const char *tab = memchr(p, '\t', (size_t)(end - p));
        const char *f_end = tab ? tab : end;
        if (!tab && col < PF_CRITEO_FIELDS - 1) {
            *column = col + 1; /* the first one missing */
            snprintf(why, why_len, "%d fields, the Criteo layout has %d (label, I1..I13, C1..C26)",
                     col + 1, PF_CRITEO_FIELDS);
            return PF_ERR_FORMAT;
        }
        if (tab && col == PF_CRITEO_FIELDS - 1) {
            int n = PF_CRITEO_FIELDS;
            for (const char *q = tab; q && n < 1000000;
                 q = memchr(q + 1, '\t', (size_t)(end - q - 1)))
                n++;
            *column = PF_CRITEO_FIELDS; /* "after C26": the first one too many */
            snprintf(why, why_len,
                     "%s%d fields, the Criteo layout has %d (label, I1..I13, C1..C26)",
                     n >= 1000000 ? "over " : "", n, PF_CRITEO_FIELDS);
            return PF_ERR_FORMAT;
        }
        size_t n = (size_t)(f_end - p);
        *column = col;
        if (col == 0) {
            if (n != 1 || (p[0] != '0' && p[0] != '1')) {
                snprintf(why, why_len, "the label must be 0 or 1, got '%.*s'",
                         (int)(n < 40 ? n : 40), p);
                return PF_ERR_FORMAT;
            }
            row->label = p[0] - '0';
        } else if (n == 0) {
            /* missing value */
        } else if (col <= PF_CRITEO_NUMERIC) {
            if (parse_int(p, n, &row->num[col - 1], why, why_len) != 0)
                return PF_ERR_FORMAT;
            row->num_present |= 1u << (col - 1);
        } else {
            int c = col - 1 - PF_CRITEO_NUMERIC;
            if (parse_id(p, n, &row->cat[c], why, why_len) != 0)
                return PF_ERR_FORMAT;
            row->cat_present |= 1u << c;
        }
        p = f_end + 1;
    }
    *column = -1;
    return PF_OK;
}

/* --- the reader ---------------------------------------------------------------------------- */

/* Bytes allocated before and after the buffer: parse_vector reads a field as the 8 bytes that
 * end at its tab, which for the first field of the buffer's first line start before it. */
#define READER_PAD 128

struct pf_criteo_reader {
    char path[1024];
    gzFile f;
    char *mem; /* PAD bytes, buf's cap bytes, PAD bytes */
    char *buf; /* cap bytes: [pos, len) not yet parsed */
    size_t cap, pos, len, max_line;
    int eof;  /* gzread said end (or failed: done) */
    int skip; /* in the middle of a line too long: drop bytes to its end */
    int done; /* a read error, or corrupt data: nothing more */
    uint64_t line, bytes;
    /* a byte range (pf_criteo_open_range): bytes are counted from `base`; the lines that
     * start before `end` are read (0: to the end of the file) */
    uint64_t base, end, start;
#if CRITEO_VECTOR
    unsigned char at[2][VECTOR_AT]; /* the tabs of the line at pos, and of the one after it */
    int cur;                        /* at[cur]: the line at pos */
    int ahead;                      /* at[!cur] holds the tabs of the line after pos... */
    size_t ahead_len;               /* ...whose length is this */
#endif
};

static void os_text(int errnum, char *buf, size_t size) {
    if (errnum == 0 || strerror_r(errnum, buf, size) != 0)
        snprintf(buf, size, "error %d", errnum);
}

pf_status pf_criteo_open(const char *path, size_t max_line, pf_criteo_reader **out, pf_error *err) {
    return pf_criteo_open_range(path, 0, 0, max_line, out, err);
}

pf_status pf_criteo_open_range(const char *path, uint64_t start, uint64_t end, size_t max_line,
                               pf_criteo_reader **out, pf_error *err) {
    *out = NULL;
    pf_criteo_reader *r = pf_calloc(1, sizeof *r);
    if (!r)
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "%s: out of memory", path);
    snprintf(r->path, sizeof r->path, "%s", path);
    r->max_line = max_line ? max_line : PF_CRITEO_MAX_LINE;
    r->cap = PF_CRITEO_BUFFER + r->max_line;
    r->mem = pf_calloc(1, r->cap + 2 * READER_PAD); /* readable bytes around buf: see PAD */
    r->buf = r->mem + READER_PAD;
    if (!r->mem) {
        pf_free(r);
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "%s: out of memory", path);
    }
    errno = 0;
    r->f = gzopen(path, "rb");
    if (!r->f) {
        char os[128];
        int e = errno;
        os_text(e, os, sizeof os);
        pf_free(r->mem);
        pf_free(r);
        return e ? pf_error_set(err, PF_ERR_IO, NULL, "%s: cannot open: %s", path, os)
                 : pf_error_set(err, PF_ERR_NOMEM, NULL, "%s: cannot open: out of memory", path);
    }
    gzbuffer(r->f, 64 << 10); /* reads of PF_CRITEO_BUFFER go straight to buf */
    r->start = start;
    r->end = end;
    if (start > 0) { /* from the byte before: the line there ends where this range's begin */
        if (!gzdirect(r->f) || gzseek(r->f, (z_off_t)(start - 1), SEEK_SET) < 0) {
            pf_criteo_close(r);
            return pf_error_set(err, PF_ERR_INVALID, NULL,
                                "%s: cannot read from byte %" PRIu64 " (a gzip file is read "
                                "from its start)",
                                path, start);
        }
        r->base = start - 1;
        r->skip = 1;
    }
    *out = r;
    return PF_OK;
}

/* The file offset of the first byte not yet parsed. */
static uint64_t offset_of_pos(const pf_criteo_reader *r) {
    return r->base + r->bytes - (uint64_t)(r->len - r->pos);
}

/* Where the line just taken is, for messages: "PATH:LINE", or in a range that does not start
 * the file "PATH:byte OFFSET" (its line number is not known without reading before it). */
static const char *where(const pf_criteo_reader *r, uint64_t line_offset, char *buf, size_t len) {
    if (r->start > 0)
        snprintf(buf, len, "%s:byte %" PRIu64, r->path, line_offset);
    else
        snprintf(buf, len, "%s:%" PRIu64, r->path, r->line);
    return buf;
}

/* Reads more after the unparsed bytes (moved to the front first). PF_OK, or an error that
 * ends the reader (truncated or corrupt gzip, a failed read). */
static pf_status fill(pf_criteo_reader *r, pf_error *err) {
#if CRITEO_VECTOR
    r->ahead = 0;
#endif
    if (r->pos > 0) {
        memmove(r->buf, r->buf + r->pos, r->len - r->pos);
        r->len -= r->pos;
        r->pos = 0;
    }
    size_t room = r->cap - r->len;
    if (room > PF_CRITEO_BUFFER)
        room = PF_CRITEO_BUFFER;
    int n = gzread(r->f, r->buf + r->len, (unsigned)room);
    if (n > 0) {
        r->len += (size_t)n;
        r->bytes += (uint64_t)n;
        return PF_OK;
    }
    r->eof = 1;
    int zerr = Z_OK;
    const char *msg = gzerror(r->f, &zerr);
    if (n == 0 && zerr == Z_OK) {
        /* gzread reports a gzip stream cut short only at gzclose_r (or as Z_BUF_ERROR) */
        return PF_OK;
    }
    r->done = 1;
    if (zerr == Z_BUF_ERROR && r->skip) /* inside a line too long, whose bytes are gone */
        return pf_error_set(err, PF_ERR_FORMAT, NULL,
                            "%s: gzip data ends early (truncated after %" PRIu64
                            " decompressed bytes, in line %" PRIu64 ", the line too long)",
                            r->path, r->bytes, r->line);
    if (zerr == Z_BUF_ERROR) /* the line it cut: the bytes of it read so far, then the end */
        return pf_error_set(err, PF_ERR_FORMAT, NULL,
                            "%s: gzip data ends early (truncated after %" PRIu64
                            " decompressed bytes, line %" PRIu64 ", column %zu)",
                            r->path, r->bytes, r->line + 1, r->len - r->pos + 1);
    if (zerr == Z_ERRNO) {
        char os[128];
        os_text(errno, os, sizeof os);
        return pf_error_set(err, PF_ERR_IO, NULL, "%s: read failed: %s", r->path, os);
    }
    return pf_error_set(err, PF_ERR_FORMAT, NULL, "%s: corrupt gzip data near line %" PRIu64 ": %s",
                        r->path, r->line + 1, msg ? msg : "unknown error");
}

#if CRITEO_VECTOR
/* The line at pos by parse_vector's way, with pos and line moved past it: 0, or -1 for a line
 * it does not take (nothing moved). */
VECTOR_TARGET static int next_vector(pf_criteo_reader *r, pf_criteo_row *row) {
    const char *p = r->buf + r->pos;
    size_t avail = r->len - r->pos, len = r->ahead_len;
    unsigned char *at = r->at[r->cur];
    if ((!r->ahead && index_line(p, avail, NULL, at, &len) != 0) || len > r->max_line)
        return -1;
    /* the next line's tabs now: its fields, read at the next call, find them stored long
     * before (read at once, the stores of its positions would hold the reads up) */
    r->ahead = avail > len + 1 &&
               index_line(p + len + 1, avail - len - 1, NULL, r->at[!r->cur], &r->ahead_len) == 0;
    if (read_fields(p, at, len, row) != 0)
        return -1;
    r->cur = !r->cur;
    r->pos += len + 1;
    r->line++;
    return 0;
}
#endif

/* Finds the end of the next line in [pos, len): its newline, or NULL. */
static char *find_newline(pf_criteo_reader *r) {
    return memchr(r->buf + r->pos, '\n', r->len - r->pos);
}

pf_status pf_criteo_next(pf_criteo_reader *r, pf_criteo_row *row, pf_error *err) {
    for (;;) {
        if (r->done)
            return PF_ERR_NOT_FOUND;
#if CRITEO_VECTOR
        /* the usual line, its newline found with its tabs; any other goes the long way */
        if (!r->skip && (!r->end || offset_of_pos(r) < r->end) && vector_usable() &&
            next_vector(r, row) == 0)
            return PF_OK;
        r->ahead = 0;
#endif
        char *nl = find_newline(r);
        if (r->skip) { /* the rest of a line too long, dropped */
            if (nl) {
                r->pos = (size_t)(nl - r->buf) + 1;
                r->skip = 0;
                continue;
            }
            r->pos = r->len;
            if (r->eof) { /* the end: checked as any end is, below */
                r->skip = 0;
                continue;
            }
            pf_status st = fill(r, err);
            if (st != PF_OK)
                return st;
            continue;
        }
        uint64_t line_offset = offset_of_pos(r);
        if (r->end && line_offset >= r->end) { /* the next range's first line */
            gzclose_r(r->f);
            r->f = NULL;
            r->done = 1;
            return PF_ERR_NOT_FOUND;
        }
        char at[1100];
        size_t have = nl ? (size_t)(nl - r->buf) - r->pos : r->len - r->pos;
        if (!nl && !r->eof && have <= r->max_line) {
            pf_status st = fill(r, err);
            if (st != PF_OK)
                return st;
            continue;
        }
        if (have > r->max_line) {
            r->line++;
            r->skip = 1;
            r->pos = nl ? (size_t)(nl - r->buf) : r->len; /* the skip finds its end */
            return pf_error_set(err, PF_ERR_FORMAT, NULL,
                                "%s: the line is longer than %zu bytes (column %zu is past the "
                                "limit); not read",
                                where(r, line_offset, at, sizeof at), r->max_line, r->max_line + 1);
        }
        if (!nl && have == 0) { /* the end */
            int rc = gzclose_r(r->f);
            r->f = NULL;
            r->done = 1;
            if (rc == Z_BUF_ERROR)
                return pf_error_set(err, PF_ERR_FORMAT, NULL,
                                    "%s: gzip data ends early (truncated after %" PRIu64
                                    " decompressed bytes, line %" PRIu64 ", column 1)",
                                    r->path, r->bytes, r->line + 1);
            return PF_ERR_NOT_FOUND;
        }
        const char *line = r->buf + r->pos;
        r->pos += have + (nl ? 1 : 0);
        r->line++;
        if (have == 0 || (have == 1 && line[0] == '\r'))
            continue; /* blank */
        int column;
        char why[160];
        if (pf_criteo_parse_line(line, have, row, &column, why, sizeof why) != PF_OK) {
            where(r, line_offset, at, sizeof at);
            if (column >= 0)
                return pf_error_set(err, PF_ERR_FORMAT, NULL, "%s: column %s: %s", at,
                                    pf_criteo_column_name(column), why);
            return pf_error_set(err, PF_ERR_FORMAT, NULL, "%s: %s", at, why);
        }
        return PF_OK;
    }
}

int pf_criteo_ended(const pf_criteo_reader *r) {
    return r->done;
}

uint64_t pf_criteo_line(const pf_criteo_reader *r) {
    return r->line;
}

uint64_t pf_criteo_bytes(const pf_criteo_reader *r) {
    return r->bytes;
}

void pf_criteo_close(pf_criteo_reader *r) {
    if (!r)
        return;
    if (r->f)
        gzclose_r(r->f);
    pf_free(r->mem);
    pf_free(r);
}
