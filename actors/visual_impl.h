/*
 * visual_impl.h - what the terminal visualizer's two renderers share
 * (visual.c: events, visual_block.c: blocks): content built line by line,
 * then folded and framed under a rule with a title.
 */
#ifndef VISUAL_IMPL_H
#define VISUAL_IMPL_H

#include "visual.h"

enum { FOLD_DEFAULT = 40, WIDTH_DEFAULT = 80 };

/* ANSI colours */
#define BLUE          "34"
#define YELLOW        "33"
#define RED           "31"
#define GOLD          "38;5;178"
#define MAGENTA       "35"
#define BRIGHT_YELLOW "93"
#define WHITE         "37"
#define GREY          "90"

typedef struct vis_lines {
    char **v;
    size_t n, cap;
} vis_lines;

/* Text split at newlines into lines, each after `indent`. */
void vis_text(vis_lines *l, const char *indent, const char *s);
/* "label text" (nothing when text is NULL or empty). */
void vis_labeled(vis_lines *l, const char *label, const char *text);
/* The rule with title, a blank line, the lines folded to o->fold_lines,
 * a blank line; every line after indent. */
void vis_frame(rt_text *out, const char *title, const char *color, const vis_lines *l,
               const visual_opts *o, const char *indent);
void vis_lines_free(vis_lines *l);

#endif
