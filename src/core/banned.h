/*
 * Included last by src/core/common.h (after the system headers, as Git does). It turns functions
 * that are easy to misuse into compile errors: unbounded copies, non-reentrant parsers and time
 * conversions. Use snprintf, strtol/strtoll with end checks, gmtime_r and localtime_r instead.
 */
#ifndef TXO_BANNED_H
#define TXO_BANNED_H

#define BANNED(func) sorry_##func##_is_a_banned_function

#undef strcpy
#define strcpy(x, y) BANNED(strcpy)
#undef strcat
#define strcat(x, y) BANNED(strcat)
#undef sprintf
#define sprintf(...) BANNED(sprintf)
#undef strtok
#define strtok(x, y) BANNED(strtok)
#undef atoi
#define atoi(x) BANNED(atoi)
#undef gmtime
#define gmtime(x) BANNED(gmtime)
#undef localtime
#define localtime(x) BANNED(localtime)

#endif
