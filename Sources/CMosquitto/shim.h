#ifndef PERIMETER_CMOSQUITTO_SHIM_H
#define PERIMETER_CMOSQUITTO_SHIM_H
#include <mosquitto.h>
#include <mqtt_protocol.h>
#endif
