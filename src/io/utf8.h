/*
 * utf8.h — strict UTF-8 validation for the file formats (internal).
 *
 * Valid means what Unicode (Table 3-7) and RFC 3629 call well-formed: no overlong forms, no
 * surrogates (U+D800..U+DFFF), nothing above U+10FFFF, no truncated sequences, no stray
 * continuation bytes, no bytes 0xF8..0xFF.
 */
#ifndef EMBER_IO_UTF8_H
#define EMBER_IO_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The length (1 to 4) of the valid UTF-8 sequence that starts at p, of the len > 0 bytes
 * there; 0 if none does, with a reason such as "overlong encoding of U+002F (bytes c0 af)" in
 * why[0..cap-1] when why is not NULL. */
size_t emi_utf8_seq(const uint8_t *p, size_t len, char *why, size_t cap);

/* Checks the `len` bytes at p. True when they are valid UTF-8; otherwise false, with the
 * offset of the first bad sequence in *at and its reason in why (as emi_utf8_seq). */
bool emi_utf8_check(const uint8_t *p, size_t len, size_t *at, char *why, size_t cap);

#endif /* EMBER_IO_UTF8_H */
