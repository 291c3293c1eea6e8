/* rt.h - everything the runtime offers to the rest of parley. */
#ifndef RT_H
#define RT_H

#include "actor.h"
#include "buf.h"
#include "call.h"
#include "err.h"
#include "log.h"
#include "msg.h"
#include "runtime.h"
#include "sup.h"
#include "timer.h"
#include "units.h"
#include "uuid.h"

#endif
