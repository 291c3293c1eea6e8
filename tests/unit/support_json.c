/* support_json.c - see support_json.h. */
#include "support_json.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

json_t *tj_json(const char *text)
{
    json_error_t e;
    json_t *v = json_loads(text, JSON_DECODE_ANY, &e);
    ck_assert_msg(v != NULL, "bad test JSON: %s: %s", e.text, text);
    return v;
}

json_t *tj_jsonq(const char *text)
{
    char *s = strdup(text);
    ck_assert_ptr_nonnull(s);
    for (char *p = s; *p; p++)
        if (*p == '\'')
            *p = '"';
    json_t *v = tj_json(s);
    free(s);
    return v;
}

void tj_equal(const json_t *got, json_t *want)
{
    char *g = json_dumps(got, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
    char *w = json_dumps(want, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
    ck_assert_msg(json_equal((json_t *)got, want), "got %s, want %s", g, w);
    free(g);
    free(w);
    json_decref(want);
}
