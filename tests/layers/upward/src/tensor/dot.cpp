// A tensor file that reaches up into the engine: the layer check must refuse it.
#include "engine/engine.h"
#include "util/error.h"
