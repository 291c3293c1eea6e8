/*
 * verdict.h - a conversation's typed verdict (parley.h) as HTTP: the one
 * place that says which status and which JSON body each outcome gets.
 *
 *   COMMITTED  201 {"events": [{"id", "index", "duplicate"?: true}...]}
 *   DUPLICATE  201 {"events": [{"id", "index"}...], "duplicate": true}
 *   DEFERRED   202 {"events": [{"id"}], "detail"}
 *   REJECTED   409 {"detail", "rule", "event_id", "pending_tool_call_ids"}
 *   CONFLICT   409 {"detail"}          INVALID   422 {"detail"}
 *   NOT_FOUND  404 {"detail"}          FAILED    500 {"detail"}
 *   BUSY       503 {"detail", "retry_after"?}, and a Retry-After header
 *   DONE       200 {"success": true}
 */
#ifndef NET_VERDICT_H
#define NET_VERDICT_H

#include "parley.h"
#include "runtime/buf.h"

/* The status; *body gets the JSON body (NULL if out of memory), and
 * *retry_after the seconds of a Retry-After header (0: none). */
int net_verdict_http(const pl_verdict *v, rt_buf **body, unsigned *retry_after);

/* The status of an outcome (for answers that carry only a detail). */
int net_outcome_status(pl_outcome o);

#endif
