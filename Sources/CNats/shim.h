#ifndef PERIMETER_CNATS_SHIM_H
#define PERIMETER_CNATS_SHIM_H
#include <nats/nats.h>
#endif
