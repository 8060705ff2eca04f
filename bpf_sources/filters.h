/* -p / -t filters: TGID_OK(x) and TID_OK(x) are passed as cflags by
 * common/filters.h's id_filter_cflag(); without them every id passes. */
#ifndef BPFDIAG_FILTERS_H
#define BPFDIAG_FILTERS_H
#ifndef TGID_OK
#define TGID_OK(x) (1)
#endif
#ifndef TID_OK
#define TID_OK(x) (1)
#endif
#endif
