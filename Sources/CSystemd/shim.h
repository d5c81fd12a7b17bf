#ifndef COUNTDOWND_CSYSTEMD_SHIM_H
#define COUNTDOWND_CSYSTEMD_SHIM_H
#include <systemd/sd-daemon.h>
#include <systemd/sd-journal.h>
#endif
