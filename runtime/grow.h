/*
 * grow.h - the one growable-array helper: make room for `need` elements of
 * `elem` bytes in *p (capacity *cap, doubled as needed, from at least
 * `first`). 0, or -ENOMEM with *p and *cap unchanged.
 */
#ifndef RT_GROW_H
#define RT_GROW_H

#include <errno.h>
#include <stdlib.h>

static inline int rt_grow(void **p, size_t *cap, size_t need, size_t elem, size_t first)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : first;
    while (c < need)
        c *= 2;
    void *n = realloc(*p, c * elem);
    if (n == NULL)
        return -ENOMEM;
    *p = n;
    *cap = c;
    return 0;
}

#endif
