// Error types thrown by ndtrain. Only cli/main.cpp catches them.
//
// ConfigError: a user-supplied option is wrong (bad key, type or range).
// DataError: a dataset file is missing or malformed.
// CheckpointError: a checkpoint is missing, truncated or corrupt.
// CommError: a communication operation failed or timed out.
// MemoryError: an allocation would pass the memory cap (train.mem_cap_mb).
// Every other failure is a plain Error; a failed NDT_ASSERT is a bug.
#pragma once

#include <stdexcept>
#include <string>

namespace ndt {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

class ConfigError : public Error {
 public:
  using Error::Error;
};

class DataError : public Error {
 public:
  using Error::Error;
};

class CheckpointError : public Error {
 public:
  using Error::Error;
};

class CommError : public Error {
 public:
  using Error::Error;
};

class MemoryError : public Error {
 public:
  using Error::Error;
};

}  // namespace ndt
