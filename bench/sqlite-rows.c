// sqlite-rows: what one START row costs SQLite, keyed upsert against an append-only rowid log.
// The rows and settings are countdownd's (WAL, synchronous=NORMAL, no autocheckpoint), with names
// from 8 interleaved clients ("t<client>-<n>"), committed in batches of the given size.
//
//   cc -O2 -o sqlite-rows bench/sqlite-rows.c -lsqlite3 && ./sqlite-rows DIRECTORY 5 256
//
// Prints microseconds per row and per commit for each layout and batch size. Not part of
// `make bench`: it is the measurement behind the "next storage change" in BENCHMARKS.md.
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void run(const char *directory, int append_log, int batch) {
    const int rows = 100000;
    char path[4096], wal[4200];
    snprintf(path, sizeof path, "%s/rows-%d-%d.db", directory, append_log, batch);
    snprintf(wal, sizeof wal, "%s-wal", path);
    unlink(path);
    unlink(wal);
    sqlite3 *db;
    if (sqlite3_open(path, &db) != SQLITE_OK) { fprintf(stderr, "cannot open %s\n", path); exit(2); }
    sqlite3_exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA wal_autocheckpoint=0;"
                     "PRAGMA cache_size=-16000;", 0, 0, 0);
    const char *schema = append_log
        ? "CREATE TABLE c(seq INTEGER PRIMARY KEY, name TEXT NOT NULL, state TEXT, total INTEGER, du INTEGER,"
          " db INTEGER, rem INTEGER, fin INTEGER, owner INTEGER, late INTEGER)"
        : "CREATE TABLE c(name TEXT PRIMARY KEY NOT NULL, state TEXT, total INTEGER, du INTEGER, db INTEGER,"
          " rem INTEGER, fin INTEGER, owner INTEGER, late INTEGER) WITHOUT ROWID";
    sqlite3_exec(db, schema, 0, 0, 0);
    sqlite3_stmt *insert;
    sqlite3_prepare_v2(db, append_log
        ? "INSERT INTO c(name, state, total, du, db, rem, fin, owner, late) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9)"
        : "INSERT OR REPLACE INTO c VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9)", -1, &insert, 0);
    double started = now();
    for (int first = 0; first < rows; first += batch) {
        sqlite3_exec(db, "BEGIN", 0, 0, 0);
        for (int i = first; i < first + batch && i < rows; i++) {
            char name[32];
            snprintf(name, sizeof name, "t%d-%d", i % 8, i / 8);
            sqlite3_bind_text(insert, 1, name, -1, SQLITE_TRANSIENT);
            sqlite3_bind_text(insert, 2, "running", -1, SQLITE_STATIC);
            sqlite3_bind_int64(insert, 3, 60000);
            sqlite3_bind_int64(insert, 4, 1700000000000LL + i);
            sqlite3_bind_int64(insert, 5, 123456789000LL + i);
            sqlite3_bind_int64(insert, 6, 0);
            sqlite3_bind_null(insert, 7);
            sqlite3_bind_int64(insert, 8, 0);
            sqlite3_bind_null(insert, 9);
            sqlite3_step(insert);
            sqlite3_reset(insert);
        }
        sqlite3_exec(db, "COMMIT", 0, 0, 0);
    }
    double seconds = now() - started;
    printf("%-18s batch %4d: %6.2f us/row, %7.1f us/commit\n", append_log ? "append-only log" : "keyed upsert",
           batch, seconds / rows * 1e6, seconds / ((rows + batch - 1) / batch) * 1e6);
    sqlite3_finalize(insert);
    sqlite3_close(db);
    unlink(path);
    unlink(wal);
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: sqlite-rows DIRECTORY BATCH...\n"); return 2; }
    for (int i = 2; i < argc; i++) {
        run(argv[1], 0, atoi(argv[i]));
        run(argv[1], 1, atoi(argv[i]));
    }
    return 0;
}
