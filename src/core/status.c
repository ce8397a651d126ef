/* status.c — status names and the per-thread last-error message. */
#include <stdio.h>

#include "core/internal.h"

#define EMI_ERR_CAP 512

static _Thread_local char emi_err[EMI_ERR_CAP];

const char *em_version(void) { return EMBER_VERSION_STRING; }

const char *em_status_name(em_status s) {
    static const char *const names[EM_STATUS_COUNT] = {
        "EM_OK",          "EM_ERR_ARG",     "EM_ERR_SHAPE",    "EM_ERR_DTYPE",
        "EM_ERR_DEVICE",  "EM_ERR_UNSUPPORTED", "EM_ERR_NOMEM", "EM_ERR_BACKEND",
        "EM_ERR_IO",      "EM_ERR_PROTOCOL", "EM_ERR_AUTH",    "EM_ERR_STATE"};
    if ((int)s < 0 || (int)s >= EM_STATUS_COUNT) return "EM_ERR_UNKNOWN";
    return names[s];
}

const char *em_last_error(void) { return emi_err; }

void em_clear_error(void) { emi_err[0] = '\0'; }

em_status emi_vfail(em_status s, const char *fmt, va_list ap) {
    vsnprintf(emi_err, sizeof emi_err, fmt, ap);
    return s;
}

em_status emi_fail(em_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    emi_vfail(s, fmt, ap);
    va_end(ap);
    return s;
}

em_status em_backend_set_error(em_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    emi_vfail(s, fmt, ap);
    va_end(ap);
    return s;
}
