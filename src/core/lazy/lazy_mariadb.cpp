// The MariaDB Connector/C entry points wattscope calls, each forwarding to libmariadb opened on first use (see
// lazy_lib.hpp). Without the library mysql_init() returns null, which the MySQL store turns into
// lazy::mariadb().error(); nothing else is reached without a connection.
#include "core/lazy/lazy_lib.hpp"

#include <mysql.h>

namespace {
using wattscope::lazy::function;
using wattscope::lazy::mariadb;
} // namespace

// `fail` is what the call returns when the library is missing; void() for the functions that return nothing.
#define WS_FORWARD(ret, name, fail, params, args)                                                                      \
  ret STDCALL name params {                                                                                            \
    static auto* f = function<decltype(::name)>(mariadb(), #name);                                                     \
    return f ? f args : fail;                                                                                          \
  }

extern "C" {

WS_FORWARD(MYSQL*, mysql_init, nullptr, (MYSQL * m), (m))
WS_FORWARD(int, mysql_options, 1, (MYSQL * m, enum mysql_option o, const void* a), (m, o, a))
WS_FORWARD(MYSQL*, mysql_real_connect, nullptr,
           (MYSQL * m, const char* host, const char* user, const char* pw, const char* db, unsigned int port,
            const char* sock, unsigned long flags),
           (m, host, user, pw, db, port, sock, flags))
WS_FORWARD(void, mysql_close, void(), (MYSQL * m), (m))
WS_FORWARD(my_bool, mysql_autocommit, 1, (MYSQL * m, my_bool mode), (m, mode))
WS_FORWARD(my_bool, mysql_commit, 1, (MYSQL * m), (m))
WS_FORWARD(my_bool, mysql_rollback, 1, (MYSQL * m), (m))
WS_FORWARD(unsigned int, mysql_errno, 2002u, (MYSQL * m), (m))
WS_FORWARD(const char*, mysql_error, "libmariadb is not available", (MYSQL * m), (m))
WS_FORWARD(my_socket, mysql_get_socket, -1, (MYSQL * m), (m))
WS_FORWARD(int, mysql_query, 1, (MYSQL * m, const char* q), (m, q))
WS_FORWARD(int, mysql_real_query, 1, (MYSQL * m, const char* q, unsigned long n), (m, q, n))
WS_FORWARD(MYSQL_RES*, mysql_store_result, nullptr, (MYSQL * m), (m))
WS_FORWARD(void, mysql_free_result, void(), (MYSQL_RES * r), (r))
WS_FORWARD(unsigned int, mysql_num_fields, 0u, (MYSQL_RES * r), (r))
WS_FORWARD(MYSQL_FIELD*, mysql_fetch_fields, nullptr, (MYSQL_RES * r), (r))
WS_FORWARD(MYSQL_ROW, mysql_fetch_row, nullptr, (MYSQL_RES * r), (r))
WS_FORWARD(unsigned long, mysql_real_escape_string, static_cast<unsigned long>(-1),
           (MYSQL * m, char* to, const char* from, unsigned long n), (m, to, from, n)) // issue 33
WS_FORWARD(MYSQL_STMT*, mysql_stmt_init, nullptr, (MYSQL * m), (m))
WS_FORWARD(int, mysql_stmt_prepare, 1, (MYSQL_STMT * s, const char* q, unsigned long n), (s, q, n))
WS_FORWARD(int, mysql_stmt_execute, 1, (MYSQL_STMT * s), (s))
WS_FORWARD(int, mysql_stmt_fetch, 1, (MYSQL_STMT * s), (s))
WS_FORWARD(int, mysql_stmt_fetch_column, 1, (MYSQL_STMT * s, MYSQL_BIND* b, unsigned int col, unsigned long off),
           (s, b, col, off))
WS_FORWARD(my_bool, mysql_stmt_bind_param, 1, (MYSQL_STMT * s, MYSQL_BIND* b), (s, b))
WS_FORWARD(my_bool, mysql_stmt_bind_result, 1, (MYSQL_STMT * s, MYSQL_BIND* b), (s, b))
WS_FORWARD(my_bool, mysql_stmt_close, 1, (MYSQL_STMT * s), (s))
WS_FORWARD(my_bool, mysql_stmt_free_result, 1, (MYSQL_STMT * s), (s))
WS_FORWARD(unsigned int, mysql_stmt_errno, 2002u, (MYSQL_STMT * s), (s))
WS_FORWARD(const char*, mysql_stmt_error, "libmariadb is not available", (MYSQL_STMT * s), (s))

} // extern "C"
