/* SPDX-License-Identifier: MIT */
/* The SQLite database of hook_lock's sqlite scenario and of its diagnostic
 * hook_sqlite_why: one table t(a, b) in WAL mode, made afresh at a path of
 * the program's own and removed with its -wal and -shm files at the end. */
#ifndef FERN_BENCH_HOOK_SQLITE_DB_H
#define FERN_BENCH_HOOK_SQLITE_DB_H

#include <sqlite3.h>
#include <stdio.h>
#include <unistd.h>

/* Make the database at path. Returns 0, or -1 when SQLite refused. */
static inline int hook_sqlite_db_create(const char *path)
{
    sqlite3 *db;
    int ok = sqlite3_open(path, &db) == SQLITE_OK &&
             sqlite3_exec(db, "PRAGMA journal_mode=WAL; CREATE TABLE t(a INTEGER, b INTEGER);", NULL,
                          NULL, NULL) == SQLITE_OK;
    sqlite3_close(db);
    return ok ? 0 : -1;
}

/* Remove the database at path and its WAL files. */
static inline void hook_sqlite_db_remove(const char *path)
{
    char p[300];
    unlink(path);
    snprintf(p, sizeof p, "%s-wal", path);
    unlink(p);
    snprintf(p, sizeof p, "%s-shm", path);
    unlink(p);
}

#endif
