#ifndef COUNTDOWND_CSQLITE_SHIM_H
#define COUNTDOWND_CSQLITE_SHIM_H
#include <sqlite3.h>
#endif
