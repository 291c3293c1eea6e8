/*
 * alloc.c - the allocator behind this process's malloc, and what the
 * benchmarks ask of it. The parley command links mimalloc when built with
 * it (CMakeLists.txt, PARLEY_MIMALLOC); the name says what malloc really
 * is at run time, from a block malloc returned, not what the build meant.
 */
#include "cli.h"

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#ifdef PARLEY_MIMALLOC
#include <mimalloc.h>
#endif

void cli_alloc_init(void)
{
#ifdef PARLEY_MIMALLOC
    /* Memory back to the kernel as soon as mimalloc has a free page, and a
     * thread's segments committed as they fill, not whole: a server's
     * conversations at rest are most of its memory (README, "Side by side":
     * about 400 B a conversation at rest, and no cost in the append's rate
     * measured). MIMALLOC_RESET_DELAY (the delay's name in mimalloc 2.0) and
     * MIMALLOC_EAGER_COMMIT in the environment still choose. */
    if (getenv("MIMALLOC_DECOMMIT_DELAY") == NULL && getenv("MIMALLOC_RESET_DELAY") == NULL)
        mi_option_set(mi_option_decommit_delay, 0);
    if (getenv("MIMALLOC_EAGER_COMMIT") == NULL)
        mi_option_set(mi_option_eager_commit, 0);
#endif
}

const char *cli_alloc_name(void)
{
#ifdef PARLEY_MIMALLOC
    static char name[32];
    void *p = calloc(1, 16); /* calloc: gcc takes a const pointer as a read */
    bool ours = p != NULL && mi_is_in_heap_region(p);
    free(p);
    if (ours) {
        int v = mi_version(); /* e.g. 209 */
        snprintf(name, sizeof(name), "mimalloc %d.%d.%d", v / 100, v / 10 % 10, v % 10);
        return name;
    }
#endif
    return "glibc malloc";
}

void cli_heap_trim(void)
{
#ifdef PARLEY_MIMALLOC
    mi_collect(true);
#endif
    malloc_trim(0);
}

size_t cli_heap_bytes(void)
{
#ifdef PARLEY_MIMALLOC
    /* mimalloc keeps no count of the bytes in use (its statistics are a
     * debug build's): what it holds from the kernel, once it has returned
     * what it can, is the measure */
    cli_heap_trim();
    return (size_t)cli_rss_bytes();
#else
    return mallinfo2().uordblks;
#endif
}
