/**
 * The native half of a large result's serialization (src/mcp/wire-text.ts, docs/architecture.md
 * "Results"): a tiny N-API addon in C that escapes a string twice (the exact UTF-8 bytes of
 * `JSON.stringify(JSON.stringify(s)).slice(3, -3)`) straight into a Buffer, in one native pass to
 * count and one to fill, 16 characters at a time with SSE2 where the CPU has it (base64 12 bytes
 * at a time with SSSE3: 0.15 ms a MiB here, against 0.30 scalar and 0.21 for Node 20's
 * Buffer.toString). Pure JavaScript cannot do it fast enough on this machine (two serializer walks
 * of a MiB are ~13 ms; the search-and-replace passes ~4 ms and megabyte-sized intermediate strings
 * for the collector). It also gives the runner three system calls Node lacks (SO_PEERCRED,
 * pidfd_open, pidfd_getfd) for files_read's descriptor handoff (src/sandbox/handoff.ts).
 *
 * As src/sandbox/native.ts: the C source lives here, the artifact goes to a directory named after
 * its hash, first `<install>/dist/native/<hash>/wire-text.node` (built by scripts/setup.sh), else
 * `<cacheDir>/native-<hash>/wire-text.node` (built in the background on first start when gcc and
 * Node's headers are present). Loading never blocks or breaks a call: until the addon is loaded,
 * and whenever it is absent or fails to load, wire-text.ts escapes in JavaScript (always correct,
 * slower).
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { buildDirAtomically } from '../core/native-build.js';

const run = promisify(execFile);

/**
 * The addon. Strings of ASCII characters only (most source text; V8 keeps them one byte per
 * character) are read as Latin-1 and escaped 16 bytes at a time; any other string is read as
 * UTF-16 and written as UTF-8, a lone surrogate as the `\\udxxx` the serializer writes for it.
 */
export const WIRE_TEXT_C = `
#define _GNU_SOURCE
#include <node_api.h>
#include <errno.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

/* Each ASCII character's twice-escaped form and its length. */
static unsigned char elen[128];
static char eform[128][8];

static void init_table(void) {
  static const char hex[] = "0123456789abcdef";
  for (int c = 0; c < 128; c++) {
    char *o = eform[c];
    int n = 0;
    if (c < 0x20) {
      char s = 0;
      switch (c) { case '\\b': s = 'b'; break; case '\\t': s = 't'; break; case '\\n': s = 'n'; break; case '\\f': s = 'f'; break; case '\\r': s = 'r'; break; }
      o[n++] = '\\\\'; o[n++] = '\\\\';
      if (s) o[n++] = s;
      else { o[n++] = 'u'; o[n++] = '0'; o[n++] = '0'; o[n++] = hex[c >> 4]; o[n++] = hex[c & 15]; }
    } else if (c == '"' || c == '\\\\') { o[n++] = '\\\\'; o[n++] = '\\\\'; o[n++] = '\\\\'; o[n++] = (char)c; }
    else o[n++] = (char)c;
    elen[c] = (unsigned char)n;
  }
}

/* ---- ASCII strings, one byte per character ---- */
#ifdef __SSE2__
/* Bit i set: byte i is a control character, a quote or a backslash (bytes >= 0x80 never come here). */
static inline unsigned special16(__m128i v) {
  __m128i m = _mm_or_si128(_mm_cmplt_epi8(v, _mm_set1_epi8(0x20)),
                           _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')), _mm_cmpeq_epi8(v, _mm_set1_epi8('\\\\'))));
  return (unsigned)_mm_movemask_epi8(m);
}
#endif

static size_t count_ascii(const unsigned char *s, size_t n) {
  size_t out = n, i = 0;
#ifdef __SSE2__
  for (; i + 16 <= n; i += 16) {
    unsigned m = special16(_mm_loadu_si128((const __m128i *)(s + i)));
    while (m) { out += elen[s[i + (unsigned)__builtin_ctz(m)]] - 1; m &= m - 1; }
  }
#endif
  for (; i < n; i++) out += elen[s[i]] - 1;
  return out;
}

static void fill_ascii(const unsigned char *s, size_t n, char *o, const char *end) {
  size_t i = 0;
#ifdef __SSE2__
  /* Every character makes at least one byte: while 16 remain, a 16-byte store stays inside the output. */
  while (i + 16 <= n) {
    __m128i v = _mm_loadu_si128((const __m128i *)(s + i));
    _mm_storeu_si128((__m128i *)o, v);
    unsigned m = special16(v);
    if (!m) { i += 16; o += 16; continue; }
    unsigned k = (unsigned)__builtin_ctz(m);
    i += k; o += k;
    unsigned char c = s[i++];
    if (o + 8 <= end) memcpy(o, eform[c], 8); else memcpy(o, eform[c], elen[c]);
    o += elen[c];
  }
#endif
  for (; i < n; i++) { memcpy(o, eform[s[i]], elen[s[i]]); o += elen[s[i]]; }
}

/* ---- any other string, as UTF-16 code units ---- */
static inline int is_high(uint16_t u) { return u >= 0xd800 && u <= 0xdbff; }
static inline int is_low(uint16_t u) { return u >= 0xdc00 && u <= 0xdfff; }

/* Bytes the unit at s[i] makes (a surrogate pair: both units, *step = 2). */
static inline size_t unit_len(const uint16_t *s, size_t i, size_t n, size_t *step) {
  uint16_t u = s[i];
  *step = 1;
  if (u < 0x80) return elen[u];
  if (u < 0x800) return 2;
  if (is_high(u) && i + 1 < n && is_low(s[i + 1])) { *step = 2; return 4; }
  if (is_high(u) || is_low(u)) return 7; /* a lone surrogate: \\\\udxxx */
  return 3;
}

static inline char *unit_put(const uint16_t *s, size_t i, size_t n, size_t *step, char *o) {
  static const char hex[] = "0123456789abcdef";
  uint16_t u = s[i];
  *step = 1;
  if (u < 0x80) { memcpy(o, eform[u], elen[u]); return o + elen[u]; }
  if (u < 0x800) { *o++ = (char)(0xc0 | (u >> 6)); *o++ = (char)(0x80 | (u & 0x3f)); return o; }
  if (is_high(u) && i + 1 < n && is_low(s[i + 1])) {
    uint32_t cp = 0x10000 + (((uint32_t)u - 0xd800) << 10) + ((uint32_t)s[i + 1] - 0xdc00);
    *o++ = (char)(0xf0 | (cp >> 18)); *o++ = (char)(0x80 | ((cp >> 12) & 0x3f));
    *o++ = (char)(0x80 | ((cp >> 6) & 0x3f)); *o++ = (char)(0x80 | (cp & 0x3f));
    *step = 2;
    return o;
  }
  if (is_high(u) || is_low(u)) {
    *o++ = '\\\\'; *o++ = '\\\\'; *o++ = 'u';
    *o++ = hex[u >> 12]; *o++ = hex[(u >> 8) & 15]; *o++ = hex[(u >> 4) & 15]; *o++ = hex[u & 15];
    return o;
  }
  *o++ = (char)(0xe0 | (u >> 12)); *o++ = (char)(0x80 | ((u >> 6) & 0x3f)); *o++ = (char)(0x80 | (u & 0x3f));
  return o;
}

#ifdef __SSE2__
/* Bit pairs set for the 8 units that are not plain ASCII (control, quote, backslash, >= 0x80). */
static inline int special8(__m128i v) {
  /* signed compares: units >= 0x8000 are negative, so caught by "< 0x20" */
  __m128i m = _mm_or_si128(_mm_cmplt_epi16(v, _mm_set1_epi16(0x20)), _mm_cmpgt_epi16(v, _mm_set1_epi16(0x7f)));
  m = _mm_or_si128(m, _mm_or_si128(_mm_cmpeq_epi16(v, _mm_set1_epi16('"')), _mm_cmpeq_epi16(v, _mm_set1_epi16('\\\\'))));
  return _mm_movemask_epi8(m);
}
#endif

static size_t count_utf16(const uint16_t *s, size_t n) {
  size_t out = 0, i = 0, step;
  while (i < n) {
#ifdef __SSE2__
    while (i + 8 <= n && !special8(_mm_loadu_si128((const __m128i *)(s + i)))) { i += 8; out += 8; }
    if (i >= n) break;
#endif
    out += unit_len(s, i, n, &step);
    i += step;
  }
  return out;
}

static void fill_utf16(const uint16_t *s, size_t n, char *o) {
  size_t i = 0, step;
#ifdef __SSE2__
  /* Every unit makes at least one byte: while 8 remain, an 8-byte store stays inside the output. */
  while (i + 8 <= n) {
    __m128i v = _mm_loadu_si128((const __m128i *)(s + i));
    _mm_storel_epi64((__m128i *)o, _mm_packus_epi16(v, v));
    int m = special8(v);
    if (!m) { i += 8; o += 8; continue; }
    size_t k = (size_t)(__builtin_ctz((unsigned)m) >> 1);
    i += k; o += k;
    o = unit_put(s, i, n, &step, o);
    i += step;
  }
#endif
  while (i < n) { o = unit_put(s, i, n, &step, o); i += step; }
}

/* escapeTwice(s: string): Buffer */
static napi_value escape_twice(napi_env env, napi_callback_info info) {
  size_t argc = 1, len = 0, u8len = 0, got = 0, n;
  napi_value arg, result;
  void *data = NULL;
  if (napi_get_cb_info(env, info, &argc, &arg, NULL, NULL) != napi_ok) return NULL;
  if (argc < 1 || napi_get_value_string_utf16(env, arg, NULL, 0, &len) != napi_ok) {
    napi_throw_type_error(env, NULL, "escapeTwice: a string is required");
    return NULL;
  }
  if (napi_get_value_string_utf8(env, arg, NULL, 0, &u8len) != napi_ok) return NULL;
  if (u8len == len) {
    /* ASCII only: its Latin-1 bytes are its characters. */
    unsigned char *s = malloc(len + 1);
    if (!s) { napi_throw_error(env, NULL, "escapeTwice: out of memory"); return NULL; }
    if (napi_get_value_string_latin1(env, arg, (char *)s, len + 1, &got) != napi_ok || got != len) { free(s); napi_throw_error(env, NULL, "escapeTwice: cannot read the string"); return NULL; }
    n = count_ascii(s, len);
    if (napi_create_buffer(env, n, &data, &result) != napi_ok) { free(s); return NULL; }
    fill_ascii(s, len, data, (char *)data + n);
    free(s);
    return result;
  }
  uint16_t *u = malloc((len + 1) * sizeof *u);
  if (!u) { napi_throw_error(env, NULL, "escapeTwice: out of memory"); return NULL; }
  if (napi_get_value_string_utf16(env, arg, (char16_t *)u, len + 1, &got) != napi_ok || got != len) { free(u); napi_throw_error(env, NULL, "escapeTwice: cannot read the string"); return NULL; }
  n = count_utf16(u, len);
  if (napi_create_buffer(env, n, &data, &result) != napi_ok) { free(u); return NULL; }
  fill_utf16(u, len, data);
  free(u);
  return result;
}

/* The bytes of a Buffer argument at argv[i]. */
static int buffer_at(napi_env env, napi_value v, unsigned char **s, size_t *len) {
  bool ok = false;
  void *data = NULL;
  if (napi_is_buffer(env, v, &ok) != napi_ok || !ok || napi_get_buffer_info(env, v, &data, len) != napi_ok) {
    napi_throw_type_error(env, NULL, "a Buffer is required");
    return 0;
  }
  *s = data ? data : (unsigned char *)"";
  return 1;
}

static int has_high_bit(const unsigned char *s, size_t len) {
  size_t i = 0;
  int high = 0;
#ifdef __SSE2__
  __m128i any = _mm_setzero_si128();
  for (; i + 16 <= len; i += 16) any = _mm_or_si128(any, _mm_loadu_si128((const __m128i *)(s + i)));
  high = _mm_movemask_epi8(any);
#endif
  for (; i < len; i++) high |= s[i] & 0x80;
  return high != 0;
}

/* One pass over ASCII bytes into a target of cap bytes: the length written; -1 when a byte is not
   ASCII; -2 when the target is too short (what it holds is then unspecified). */
static long fill_ascii_checked(const unsigned char *s, size_t n, char *o0, size_t cap) {
  char *o = o0, *end = o0 + cap;
  size_t i = 0;
#ifdef __SSE2__
  /* A 16-byte store, then at most 8 bytes of one escape 15 bytes on: 24 bytes of room. */
  while (i + 16 <= n && (size_t)(end - o) >= 24) {
    __m128i v = _mm_loadu_si128((const __m128i *)(s + i));
    _mm_storeu_si128((__m128i *)o, v);
    unsigned m = special16(v); /* a byte >= 0x80 is flagged too (a signed compare) */
    if (!m) { i += 16; o += 16; continue; }
    unsigned k = (unsigned)__builtin_ctz(m);
    i += k; o += k;
    unsigned char c = s[i++];
    if (c & 0x80) return -1;
    memcpy(o, eform[c], 8);
    o += elen[c];
  }
#endif
  for (; i < n; i++) {
    unsigned char c = s[i];
    if (c & 0x80) return -1;
    if ((size_t)(end - o) < elen[c]) return -2;
    memcpy(o, eform[c], elen[c]);
    o += elen[c];
  }
  return (long)(o - o0);
}

/* escapeTwiceAsciiInto(bytes: Buffer, target: Buffer): number. The twice-escaped form of the ASCII
   text given as bytes, in one pass: its length n, written to target[0, n) when target is long enough
   (else target holds something unspecified and n is more than its length); -1 when a byte is not ASCII. */
static napi_value escape_twice_ascii_into(napi_env env, napi_callback_info info) {
  size_t argc = 2, len, cap;
  napi_value argv[2], result;
  unsigned char *s, *t;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok) return NULL;
  if (argc < 2) { napi_throw_type_error(env, NULL, "escapeTwiceAsciiInto: bytes and target are required"); return NULL; }
  if (!buffer_at(env, argv[0], &s, &len) || !buffer_at(env, argv[1], &t, &cap)) return NULL;
  long r = fill_ascii_checked(s, len, (char *)t, cap);
  if (r == -2) r = has_high_bit(s, len) ? -1 : (long)count_ascii(s, len);
  napi_create_int64(env, (int64_t)r, &result);
  return result;
}

/* base64Into(bytes: Buffer, target: Buffer): number. The base64 text of the bytes (as
   Buffer.toString('base64'), padded): its length n, written to target[0, n) when it is long enough. */
static uint16_t b64pair[4096];
static void init_base64(void) {
  static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  for (int i = 0; i < 4096; i++) { unsigned char p[2] = { (unsigned char)a[i >> 6], (unsigned char)a[i & 63] }; memcpy(&b64pair[i], p, 2); }
}
#if defined(__x86_64__) || defined(__i386__)
#include <tmmintrin.h>
static int have_ssse3;
/* 12 bytes to 16 characters at a time with SSSE3 (reading 16): each 3 bytes spread over a 32-bit
   lane, their four 6-bit values moved to the lane's four bytes by two multiplies, and each value
   turned into its character by adding the offset of its range (A-Z, a-z, 0-9, +, /) looked up with
   a byte shuffle. Returns how many bytes it consumed (a multiple of 3). */
__attribute__((target("ssse3"))) static size_t base64_ssse3(const unsigned char *s, size_t len, char *o) {
  size_t i = 0;
  const __m128i spread = _mm_set_epi8(10, 11, 9, 10, 7, 8, 6, 7, 4, 5, 3, 4, 1, 2, 0, 1);
  const __m128i offsets = _mm_setr_epi8('a' - 26, '0' - 52, '0' - 52, '0' - 52, '0' - 52, '0' - 52, '0' - 52, '0' - 52, '0' - 52, '0' - 52, '0' - 52, '+' - 62, '/' - 63, 'A', 0, 0);
  for (; i + 16 <= len; i += 12, o += 16) {
    __m128i in = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(s + i)), spread);
    __m128i hi = _mm_mulhi_epu16(_mm_and_si128(in, _mm_set1_epi32(0x0fc0fc00)), _mm_set1_epi32(0x04000040));
    __m128i lo = _mm_mullo_epi16(_mm_and_si128(in, _mm_set1_epi32(0x003f03f0)), _mm_set1_epi32(0x01000010));
    __m128i v = _mm_or_si128(hi, lo);
    /* 0 for 0-51, 1-12 for 52-63; 13 for 0-25 */
    __m128i range = _mm_subs_epu8(v, _mm_set1_epi8(51));
    range = _mm_or_si128(range, _mm_and_si128(_mm_cmpgt_epi8(_mm_set1_epi8(26), v), _mm_set1_epi8(13)));
    _mm_storeu_si128((__m128i *)o, _mm_add_epi8(_mm_shuffle_epi8(offsets, range), v));
  }
  return i;
}
#endif

static napi_value base64_into(napi_env env, napi_callback_info info) {
  static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  size_t argc = 2, len, cap, n, i = 0;
  napi_value argv[2], result;
  unsigned char *s, *t;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok) return NULL;
  if (argc < 2) { napi_throw_type_error(env, NULL, "base64Into: bytes and target are required"); return NULL; }
  if (!buffer_at(env, argv[0], &s, &len) || !buffer_at(env, argv[1], &t, &cap)) return NULL;
  n = (len + 2) / 3 * 4;
  napi_create_int64(env, (int64_t)n, &result);
  if (n > cap) return result;
  char *o = (char *)t;
#if defined(__x86_64__) || defined(__i386__)
  if (have_ssse3) { i = base64_ssse3(s, len, o); o += i / 3 * 4; }
#endif
  /* 6 bytes to 8 characters at a time (reading 8), then 3 to 4 */
  for (; i + 8 <= len; i += 6, o += 8) {
    uint64_t w, out;
    memcpy(&w, s + i, 8);
    w = __builtin_bswap64(w);
    uint32_t hi = (uint32_t)(w >> 40), lo = (uint32_t)(w >> 16) & 0xffffff;
    out = (uint64_t)b64pair[hi >> 12] | ((uint64_t)b64pair[hi & 4095] << 16) | ((uint64_t)b64pair[lo >> 12] << 32) | ((uint64_t)b64pair[lo & 4095] << 48);
    memcpy(o, &out, 8);
  }
  for (; i + 3 <= len; i += 3, o += 4) {
    uint32_t v = ((uint32_t)s[i] << 16) | ((uint32_t)s[i + 1] << 8) | s[i + 2];
    memcpy(o, &b64pair[v >> 12], 2);
    memcpy(o + 2, &b64pair[v & 4095], 2);
  }
  if (len - i == 1) { uint32_t v = (uint32_t)s[i] << 16; o[0] = a[v >> 18]; o[1] = a[(v >> 12) & 63]; o[2] = '='; o[3] = '='; }
  else if (len - i == 2) { uint32_t v = ((uint32_t)s[i] << 16) | ((uint32_t)s[i + 1] << 8); o[0] = a[v >> 18]; o[1] = a[(v >> 12) & 63]; o[2] = a[(v >> 6) & 63]; o[3] = '='; }
  return result;
}

/* ---- descriptors (files_read's handoff, src/sandbox/handoff.ts): three calls Node lacks ---- */
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

/* The integer arguments; 0 (and a thrown TypeError) when one is not a number. */
static int int_args(napi_env env, napi_callback_info info, size_t want, int32_t *out) {
  size_t argc = 2;
  napi_value argv[2];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok) return 0;
  for (size_t i = 0; i < want; i++) {
    if (i >= argc || napi_get_value_int32(env, argv[i], &out[i]) != napi_ok) { napi_throw_type_error(env, NULL, "integer arguments are required"); return 0; }
  }
  return 1;
}

static napi_value int_result(napi_env env, long r) {
  napi_value v;
  napi_create_int32(env, r < 0 ? -errno : (int32_t)r, &v);
  return v;
}

/* peerPid(fd): the pid (in our namespace) of the process that listened on, or connected, the other end of a Unix socket; -errno on failure. */
static napi_value peer_pid(napi_env env, napi_callback_info info) {
  int32_t a[1];
  struct ucred cred;
  socklen_t len = sizeof cred;
  if (!int_args(env, info, 1, a)) return NULL;
  if (getsockopt(a[0], SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return int_result(env, -1);
  return int_result(env, cred.pid > 0 ? cred.pid : (errno = ESRCH, -1));
}

/* pidfdOpen(pid): a pidfd (close-on-exec) or -errno. */
static napi_value pidfd_open_(napi_env env, napi_callback_info info) {
  int32_t a[1];
  if (!int_args(env, info, 1, a)) return NULL;
  return int_result(env, syscall(SYS_pidfd_open, a[0], 0));
}

/* pidfdGetfd(pidfd, fd): a duplicate (close-on-exec) of that process's descriptor fd, or -errno. */
static napi_value pidfd_getfd_(napi_env env, napi_callback_info info) {
  int32_t a[2];
  if (!int_args(env, info, 2, a)) return NULL;
  return int_result(env, syscall(SYS_pidfd_getfd, a[0], a[1], 0));
}

static int export_fn(napi_env env, napi_value exports, const char *name, napi_callback cb) {
  napi_value fn;
  return napi_create_function(env, name, NAPI_AUTO_LENGTH, cb, NULL, &fn) == napi_ok && napi_set_named_property(env, exports, name, fn) == napi_ok;
}

NAPI_MODULE_INIT() {
  init_table();
  init_base64();
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  have_ssse3 = __builtin_cpu_supports("ssse3");
#endif
  if (!export_fn(env, exports, "escapeTwice", escape_twice) || !export_fn(env, exports, "escapeTwiceAsciiInto", escape_twice_ascii_into) || !export_fn(env, exports, "base64Into", base64_into)
      || !export_fn(env, exports, "peerPid", peer_pid) || !export_fn(env, exports, "pidfdOpen", pidfd_open_) || !export_fn(env, exports, "pidfdGetfd", pidfd_getfd_)) return NULL;
  return exports;
}
`;

export const WIRE_NATIVE_HASH = createHash('sha256').update(WIRE_TEXT_C).update(process.versions.napi ?? '').digest('hex').slice(0, 16);

const FILE = 'wire-text.node';

/** What the addon exports. */
export interface WireNative {
  /** JSON.stringify(JSON.stringify(s)).slice(3, -3), as UTF-8 bytes. */
  escapeTwice(s: string): Buffer;
  /**
   * The same for the ASCII text whose bytes are given: its length n, written to target[0, n) when
   * target is that long (otherwise n is more than target's length, and what target holds is
   * unspecified); -1 when a byte is not ASCII.
   */
  escapeTwiceAsciiInto(bytes: Buffer, target: Buffer): number;
  /** bytes.toString('base64') as bytes: its length n, written to target[0, n) when target is that long. */
  base64Into(bytes: Buffer, target: Buffer): number;
  /** The pid (in the runner's namespace) of the process at the other end of a connected Unix socket; -errno on failure. */
  peerPid(fd: number): number;
  /** pidfd_open(2): a pidfd (close-on-exec), or -errno. */
  pidfdOpen(pid: number): number;
  /** pidfd_getfd(2): a duplicate (close-on-exec) of that process's descriptor, or -errno. */
  pidfdGetfd(pidfd: number, fd: number): number;
}

/** <install>/dist/native/<hash>: where scripts/setup.sh puts the addon. */
export function installWireNativeDir(): string {
  return path.resolve(fileURLToPath(new URL('../native/', import.meta.url)), WIRE_NATIVE_HASH);
}

/** Node's headers: beside the running node (official builds, nodesource's package: /usr/include/node). */
function nodeIncludeDirs(): string[] {
  const dirs = [path.resolve(path.dirname(process.execPath), '..', 'include', 'node'), '/usr/include/node', '/usr/local/include/node'];
  return [...new Set(dirs)].filter((d) => existsSync(path.join(d, 'node_api.h')));
}

/** Builds the addon into `dir` (atomically: a temporary directory renamed into place); its path. */
export async function buildWireNative(dir: string): Promise<string> {
  const file = path.join(dir, FILE);
  if (existsSync(file)) return file;
  const include = nodeIncludeDirs()[0];
  if (!include) throw new Error("Node's headers (node_api.h) are not installed beside node nor in /usr/include/node");
  try {
    await buildDirAtomically(dir, async (tmp) => {
      await writeFile(path.join(tmp, 'wire-text.c'), WIRE_TEXT_C);
      await run('gcc', ['-O2', '-Wall', '-shared', '-fPIC', `-I${include}`, '-o', path.join(tmp, FILE), path.join(tmp, 'wire-text.c')]);
    });
  } catch (err) {
    if (existsSync(file)) return file; // another process built it meanwhile
    const e = err as { stderr?: string; message: string };
    throw new Error(`cannot build the wire-text addon: ${(e.stderr || e.message).trim().slice(0, 500)}`);
  }
  return file;
}

let loaded: WireNative | null = null;
let loading: Promise<WireNative | null> | undefined;

/** The addon when loaded, else null (the caller escapes in JavaScript). */
export function wireNative(): WireNative | null {
  return loaded;
}

/** Loads the addon from a file; null (and nothing changed) when it cannot be loaded or does not answer correctly. */
export function loadWireNativeFile(file: string): WireNative | null {
  try {
    const exported = createRequire(import.meta.url)(file) as Partial<WireNative>;
    for (const f of ['escapeTwice', 'escapeTwiceAsciiInto', 'base64Into', 'peerPid', 'pidfdOpen', 'pidfdGetfd'] as const) if (typeof exported[f] !== 'function') return null;
    const m = exported as WireNative;
    // A quick self-check against the serializer before any result depends on it.
    const twice = (s: string) => Buffer.from(JSON.stringify(JSON.stringify(s)).slice(3, -3), 'utf8');
    const probe = 'a"\\\n\t\u0001\u007f é\ud800😀';
    const ascii = 'plain "ascii"\\\n\u001f'.repeat(5);
    const bytes = Buffer.from(Array.from({ length: 100 }, (_, i) => (i * 37) & 255));
    if (!m.escapeTwice(probe).equals(twice(probe)) || !m.escapeTwice(ascii).equals(twice(ascii))) return null;
    const out = Buffer.alloc(1024);
    const n = m.escapeTwiceAsciiInto(Buffer.from(ascii, 'latin1'), out);
    if (!out.subarray(0, n).equals(twice(ascii)) || m.escapeTwiceAsciiInto(Buffer.from(probe), out) !== -1) return null;
    if (out.subarray(0, m.base64Into(bytes, out)).toString('latin1') !== bytes.toString('base64')) return null;
    return m as WireNative;
  } catch {
    return null;
  }
}

/** Uses this addon (or none: null) from now on; for tests and loadWireNative. */
export function setWireNative(m: WireNative | null): void {
  loaded = m;
}

/**
 * Makes the addon available: the installed one if present (loaded at once), else the one built in
 * `<cacheDir>/native-<hash>/` (built now in the background when gcc and Node's headers are
 * present). Never rejects: on any failure the JavaScript path stays in use; `onError` hears why.
 */
export function loadWireNative(cacheDir?: string, onError?: (message: string) => void): Promise<WireNative | null> {
  if (loaded) return Promise.resolve(loaded);
  const installed = path.join(installWireNativeDir(), FILE);
  if (existsSync(installed)) {
    const m = loadWireNativeFile(installed);
    if (m) {
      loaded = m;
      return Promise.resolve(m);
    }
  }
  if (!cacheDir) return Promise.resolve(null);
  loading ??= buildWireNative(path.join(cacheDir, `native-${WIRE_NATIVE_HASH}`))
    .then((file) => {
      const m = loadWireNativeFile(file);
      if (!m) throw new Error(`the wire-text addon at ${file} did not load or did not answer as the serializer does`);
      loaded = m;
      return m;
    })
    .catch((err: Error) => {
      onError?.(err.message);
      return null;
    })
    .finally(() => {
      loading = undefined;
    });
  return loading;
}
