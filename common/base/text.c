/* text.c - RFC 3339 times, JSON pointers and UTF-8 cuts (see text.h). */
#include "psflow/text.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

/* Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm), so that
 * UTC times convert without timegm(), which POSIX lacks. */
static long long days_from_civil(long long y, unsigned m, unsigned d) {
    y -= m <= 2;
    long long era = (y >= 0 ? y : y - 399) / 400;
    unsigned yoe = (unsigned)(y - era * 400);
    unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (long long)doe - 719468;
}

char *pf_text_format_rfc3339(double t, bool millis, char *buf, size_t cap) {
    long long ms = millis ? llround(t * 1000.0) : (long long)floor(t) * 1000;
    long long secs = ms / 1000 - (ms % 1000 < 0);
    int frac = (int)(ms - secs * 1000);
    time_t tt = (time_t)secs;
    struct tm tm;
    if (!gmtime_r(&tt, &tm)) {
        snprintf(buf, cap, "%s", millis ? "1970-01-01T00:00:00.000Z" : "1970-01-01T00:00:00Z");
        return buf;
    }
    if (millis)
        snprintf(buf, cap, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                 tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, frac);
    else
        snprintf(buf, cap, "%04d-%02d-%02dT%02d:%02d:%02dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                 tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
    return buf;
}

bool pf_text_parse_rfc3339(const char *s, double *out) {
    int y, mo, d, h, mi, n = 0;
    double sec;
    if (!s || sscanf(s, "%4d-%2d-%2d%*1[Tt ]%2d:%2d:%lf%n", &y, &mo, &d, &h, &mi, &sec, &n) != 6)
        return false;
    if (mo < 1 || mo > 12 || d < 1 || d > 31 || h < 0 || h > 23 || mi < 0 || mi > 59 ||
        !(sec >= 0 && sec < 61))
        return false;
    double t = (double)days_from_civil(y, (unsigned)mo, (unsigned)d) * 86400.0 + h * 3600.0 +
               mi * 60.0 + sec;
    const char *z = s + n;
    int oh, om, k = 0;
    if (*z == 'Z' || *z == 'z')
        k = 1;
    else if ((*z == '+' || *z == '-') && sscanf(z + 1, "%2d:%2d%n", &oh, &om, &k) == 2 && oh >= 0 &&
             oh <= 23 && om >= 0 && om <= 59)
        t -= (*z == '+' ? 1 : -1) * (oh * 3600.0 + om * 60.0), k++;
    else
        return false;
    if (z[k] != '\0')
        return false;
    *out = t;
    return true;
}

void pf_text_pointer_add(char *ptr, size_t cap, const char *token) {
    size_t n = strlen(ptr);
    if (n + 2 > cap)
        return;
    ptr[n++] = '/';
    for (const char *t = token; *t; t++) {
        const char *esc = *t == '~' ? "~0" : *t == '/' ? "~1" : NULL;
        size_t k = esc ? 2 : 1;
        if (n + k + 1 > cap) {
            /* Out of room: if *t continues a UTF-8 sequence, drop the sequence's start too. */
            if (((unsigned char)*t & 0xC0) == 0x80) {
                while (((unsigned char)ptr[n - 1] & 0xC0) == 0x80)
                    n--;
                n--; /* the lead byte of the character that does not fit */
            }
            break;
        }
        if (esc)
            memcpy(ptr + n, esc, 2);
        else
            ptr[n] = *t;
        n += k;
    }
    ptr[n] = '\0';
}

void pf_text_pointer_add_index(char *ptr, size_t cap, size_t index) {
    char token[24];
    snprintf(token, sizeof token, "%zu", index);
    pf_text_pointer_add(ptr, cap, token);
}

char *pf_text_cut_utf8(char *s) {
    size_t n = strlen(s), i = n;
    /* Back over at most 3 continuation bytes (10xxxxxx) to the last character's lead byte. */
    while (i > 0 && n - i < 3 && ((unsigned char)s[i - 1] & 0xC0) == 0x80)
        i--;
    if (i == 0)
        return s;
    unsigned char lead = (unsigned char)s[i - 1];
    size_t want = (lead & 0xE0) == 0xC0   ? 2
                  : (lead & 0xF0) == 0xE0 ? 3
                  : (lead & 0xF8) == 0xF0 ? 4
                                          : 0;
    if (want > n - (i - 1)) /* a lead byte whose continuation was cut off */
        s[i - 1] = '\0';
    return s;
}

int pf_text_bool(const char *s) {
    static const char *const on[] = {"1", "true", "yes", "on"}, *const off[] = {"0", "false", "no",
                                                                                "off"};
    for (size_t i = 0; s && i < sizeof on / sizeof on[0]; i++) {
        if (strcasecmp(s, on[i]) == 0)
            return 1;
        if (strcasecmp(s, off[i]) == 0)
            return 0;
    }
    return -1;
}
