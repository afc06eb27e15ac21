/*
 * error.c — status names and the thread-local message behind kiln_last_error().
 */
#include <stdio.h>
#include <string.h>

#include "runtime.h"

#define KILN_MESSAGE_BYTES 1024

static _Thread_local char last_message[KILN_MESSAGE_BYTES];

kiln_status(kiln_fail)(kiln_status status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_message, sizeof last_message, fmt, ap);
  va_end(ap);
  return status;
}

const char *kiln_last_error(void) { return last_message; }

void kiln_clear_error(void) { last_message[0] = '\0'; }

const char *kiln_status_string(kiln_status status) {
  switch (status) {
  case KILN_OK: return "KILN_OK";
  case KILN_ERROR_INVALID_ARGUMENT: return "KILN_ERROR_INVALID_ARGUMENT";
  case KILN_ERROR_UNSUPPORTED: return "KILN_ERROR_UNSUPPORTED";
  case KILN_ERROR_NO_DRIVER: return "KILN_ERROR_NO_DRIVER";
  case KILN_ERROR_DRIVER_TOO_OLD: return "KILN_ERROR_DRIVER_TOO_OLD";
  case KILN_ERROR_NO_DEVICE: return "KILN_ERROR_NO_DEVICE";
  case KILN_ERROR_NO_KERNEL_IMAGE: return "KILN_ERROR_NO_KERNEL_IMAGE";
  case KILN_ERROR_OUT_OF_MEMORY: return "KILN_ERROR_OUT_OF_MEMORY";
  case KILN_ERROR_CUDA: return "KILN_ERROR_CUDA";
  case KILN_ERROR_WORKSPACE: return "KILN_ERROR_WORKSPACE";
  case KILN_ERROR_INTERNAL: return "KILN_ERROR_INTERNAL";
  }
  return "KILN_ERROR_UNKNOWN_STATUS";
}

void kiln_version(int *major, int *minor, int *patch) {
  if (major) *major = KILN_VERSION_MAJOR;
  if (minor) *minor = KILN_VERSION_MINOR;
  if (patch) *patch = KILN_VERSION_PATCH;
}
