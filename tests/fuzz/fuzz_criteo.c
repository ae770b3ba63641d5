/* fuzz_criteo.c - libFuzzer target for pf_criteo_parse_line: the whole input as one line, then
 * each of its "\n"-separated lines, as the reader hands them over. The input is not
 * NUL-terminated, which the parser must cope with; a parsed row must hold only the values
 * the layout allows, column names must exist for every column an error reports, and the
 * vector path (where the processor has it) must give the same answer as the other. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "psflow/criteo.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void parse_one(const char *line, size_t len) {
    pf_criteo_row row, other;
    int column = -2, other_column = -2;
    char why[96], other_why[96];
    pf_criteo_use_vector(0);
    pf_status other_st =
        pf_criteo_parse_line(line, len, &other, &other_column, other_why, sizeof other_why);
    pf_criteo_use_vector(1);
    pf_status st = pf_criteo_parse_line(line, len, &row, &column, why, sizeof why);
    if (st != other_st || column != other_column)
        abort();
    if (st == PF_OK) {
        if (row.label != other.label || row.num_present != other.num_present ||
            row.cat_present != other.cat_present)
            abort();
        for (int j = 0; j < PF_CRITEO_NUMERIC; j++)
            if ((row.num_present >> j & 1) && row.num[j] != other.num[j])
                abort();
        for (int c = 0; c < PF_CRITEO_CATEGORICAL; c++)
            if ((row.cat_present >> c & 1) && row.cat[c] != other.cat[c])
                abort();
        if (row.label != 0 && row.label != 1)
            abort();
        if (row.num_present >> PF_CRITEO_NUMERIC || row.cat_present >> PF_CRITEO_CATEGORICAL)
            abort();
        return;
    }
    if (st != PF_ERR_FORMAT || column < -1 || column > PF_CRITEO_FIELDS) /* 40: "after C26" */
        abort();
    if (memchr(why, '\0', sizeof why) == NULL)
        abort();
    if (pf_criteo_column_name(column) == NULL)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *text = (const char *)data;
    parse_one(text, size);
    size_t start = 0;
    while (start < size) {
        const char *nl = memchr(text + start, '\n', size - start);
        size_t end = nl ? (size_t)(nl - text) : size;
        parse_one(text + start, end - start);
        start = end + 1;
    }
    return 0;
}
