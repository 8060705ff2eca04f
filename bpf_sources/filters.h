/* -p / -t filters: TGID_OK(x) and TID_OK(x), set by common/filters.h's
 * id_filter_cflag(). Without a flag every id passes. A list (BPFDIAG_ID_MAP_<NAME>
 * defined) is a hash map the loader fills before anything is attached, one lookup per
 * event: the program text is then the same for every list (a long list as a constant
 * expression would take clang seconds, and each list would be a compile of its own,
 * never served by the compiled-object cache). The map and
 * its lookup function (bpfdiag_<name>_ids) are put at the top of the program text by
 * common/filters.cpp's id_map_prelude(): libbcc only rewrites map calls written in
 * the main file, and never inside a macro. */
#ifndef BPFDIAG_FILTERS_H
#define BPFDIAG_FILTERS_H

#ifdef BPFDIAG_ID_MAP_TGID_OK
#define TGID_OK(x) bpfdiag_tgid_ok_ids(x)
#endif
#ifdef BPFDIAG_ID_MAP_TID_OK
#define TID_OK(x) bpfdiag_tid_ok_ids(x)
#endif

/* --cgroup / --container (common/cgroup.h): CGROUP_OK() passes when the current task is
 * in the cgroup or below it (bpf_current_task_under_cgroup on a cgroup array the loader
 * fills); CGROUP_TASK_OK(task) decides any task by walking its cgroup's parents to the
 * cgroup's id (for tasks that are not current: one being switched in or woken up; it
 * needs the OFF_* defines of common/cgroup.cpp's task walk). The maps and functions are
 * put at the top of the program text by common/filters.cpp's cgroup_prelude(). */
#ifdef BPFDIAG_CGROUP
#define CGROUP_OK() bpfdiag_cgroup_current()
#ifdef OFF_CGROUP_KN
#define CGROUP_TASK_OK(t) bpfdiag_cgroup_task(t)
#endif
#else
#define CGROUP_OK() (1)
#define CGROUP_TASK_OK(t) (1)
#endif

#ifndef TGID_OK
#define TGID_OK(x) (1)
#endif
#ifndef TID_OK
#define TID_OK(x) (1)
#endif
#endif
