/* conv_metrics.c - the conversations' figures (conversation.h). */
#include "actors/conversation.h"

#include "actors/gate.h"
#include "actors/viz.h"

conv_metrics conv_metrics_g;

void conv_metrics_render(rt_text *t)
{
    conv_metrics *m = &conv_metrics_g;
    const char *rules[CONV_METRIC_RULES] = {0};
    for (int i = GATE_INTERLEAVED_MESSAGE; i < CONV_METRIC_RULES && i <= GATE_INVALID_EVENT; i++)
        rules[i] = gate_rule_name((gate_rule)i);
    rt_metric_counter(t, "parley_events_appended_total", "Events made durable.",
                      rt_metric_get(&m->appended));
    rt_metric_counter(t, "parley_events_deferred_total",
                      "Messages deferred while tool calls were pending.",
                      rt_metric_get(&m->deferred));
    rt_metric_counter(t, "parley_events_held_total", "Events held for a parent not yet in the log.",
                      rt_metric_get(&m->held));
    rt_metric_family(t, "parley_events_rejected_total", "Events refused by the compliance gate.",
                     "rule", rules, m->rejected, CONV_METRIC_RULES);
    rt_metric_gauge(t, "parley_conversations_open",
                    "Conversations with their log open (an idle one closes it: --idle-close).",
                    atomic_load_explicit(&m->open, memory_order_relaxed));
    rt_metric_gauge(t, "parley_conversations_active",
                    "Conversations with their actors running (one at rest keeps only its summary).",
                    atomic_load_explicit(&m->active, memory_order_relaxed));
    rt_metric_gauge(t, "parley_visualizers",
                    "Visualizers running (one per watched conversation; an idle one stops).",
                    atomic_load_explicit(&viz_running, memory_order_relaxed));
}
