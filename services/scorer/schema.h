// The archive's SQLite schema (private to the scorer).
#pragma once

#include "kiln/core/status.h"
#include "kiln/store/sqlite.h"

namespace kiln::scorer::detail {

inline constexpr int64_t kSchemaVersion = 2;

// Creates the tables if missing; refuses a database written by a newer schema.
Status ensure_schema(store::Database& db);

}  // namespace kiln::scorer::detail
