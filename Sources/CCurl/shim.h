#ifndef COUNTDOWND_CCURL_SHIM_H
#define COUNTDOWND_CCURL_SHIM_H
#include <curl/curl.h>

// curl_easy_setopt, curl_multi_setopt and curl_easy_getinfo are variadic, which Swift cannot
// call: one typed wrapper per kind of argument.

static inline CURLcode countdownd_curl_easy_set_long(CURL *easy, CURLoption option, long value) {
    return curl_easy_setopt(easy, option, value);
}

static inline CURLcode countdownd_curl_easy_set_pointer(CURL *easy, CURLoption option, void *value) {
    return curl_easy_setopt(easy, option, value);
}

static inline CURLcode countdownd_curl_easy_set_string(CURL *easy, CURLoption option, const char *value) {
    return curl_easy_setopt(easy, option, value);
}

typedef size_t (*countdownd_curl_write_callback)(char *data, size_t size, size_t count, void *context);

static inline CURLcode countdownd_curl_easy_set_write_function(CURL *easy, countdownd_curl_write_callback callback) {
    return curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, callback);
}

static inline CURLcode countdownd_curl_easy_get_long(CURL *easy, CURLINFO info, long *value) {
    return curl_easy_getinfo(easy, info, value);
}

static inline CURLcode countdownd_curl_easy_get_pointer(CURL *easy, CURLINFO info, void **value) {
    return curl_easy_getinfo(easy, info, value);
}

typedef int (*countdownd_curl_socket_callback)(CURL *easy, curl_socket_t socket, int what, void *context, void *socket_context);
typedef int (*countdownd_curl_timer_callback)(CURLM *multi, long timeout_ms, void *context);

static inline CURLMcode countdownd_curl_multi_set_socket_function(CURLM *multi, countdownd_curl_socket_callback callback, void *context) {
    CURLMcode code = curl_multi_setopt(multi, CURLMOPT_SOCKETFUNCTION, callback);
    return code != CURLM_OK ? code : curl_multi_setopt(multi, CURLMOPT_SOCKETDATA, context);
}

static inline CURLMcode countdownd_curl_multi_set_timer_function(CURLM *multi, countdownd_curl_timer_callback callback, void *context) {
    CURLMcode code = curl_multi_setopt(multi, CURLMOPT_TIMERFUNCTION, callback);
    return code != CURLM_OK ? code : curl_multi_setopt(multi, CURLMOPT_TIMERDATA, context);
}

/// The easy handle and result of a finished transfer's message (CURLMSG_DONE), or 0.
static inline int countdownd_curl_message_done(CURLMsg *message, CURL **easy, CURLcode *result) {
    if (message->msg != CURLMSG_DONE) return 0;
    *easy = message->easy_handle;
    *result = message->data.result;
    return 1;
}
#endif
