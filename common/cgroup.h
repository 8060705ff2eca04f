// --cgroup PATH and --container ID (common/options.h opt::cgroup(), opt::container()):
// which cgroup v2 directory a tool traces, resolved once here for every tool.
//
// The filter itself is BPF (bpf_sources/filters.h CGROUP_OK(), CGROUP_TASK_OK()): a
// BPF_CGROUP_ARRAY that BpfSession::load fills with the directory's fd right after
// loading (the compiled program is the same for every cgroup, so the compiled-object
// cache serves every run), tested with bpf_current_task_under_cgroup: the cgroup and
// its descendants, as a user means a service or a container. A task that is not the
// current one (a task being switched in, a task woken up) is decided by walking its
// cgroup's parents (task->cgroups->dfl_cgrp, up to kCgroupWalkDepth levels) to the id.
//
// The id is the directory's inode number (stat st_ino), what bpf_get_current_cgroup_id
// returns. cgroup v2 only: on a hybrid system (v1 controllers, v2 at
// /sys/fs/cgroup/unified) the v2 hierarchy still holds every task and is the one used.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace bpfdiag {

struct CommonOptions;
class BpfPlan;

constexpr int kCgroupWalkDepth = 16;  // nesting levels CGROUP_TASK_OK() walks up

struct CgroupTarget {
  std::string path;       // absolute, e.g. /sys/fs/cgroup/system.slice/nginx.service
  std::string rel;        // under the cgroup2 mount, as /proc/PID/cgroup says it: /system.slice/nginx.service
  uint64_t id = 0;        // inode number of the directory = bpf_get_current_cgroup_id()
  std::string container;  // the full container ID --container matched ("" for --cgroup)
};

// Where cgroup2 is mounted (from /proc/self/mountinfo): /sys/fs/cgroup, or
// /sys/fs/cgroup/unified on a hybrid system; "" when it is not mounted.
std::string cgroup2_mount();
// The mount point in a mountinfo text ("" when none): the first cgroup2 mount.
std::string cgroup2_mount_from_mountinfo(std::string_view mountinfo);

// The cgroup v2 path of a process from its /proc/PID/cgroup text (the "0::" line),
// e.g. "/system.slice/docker-0123....scope"; none without such a line.
std::optional<std::string> cgroup_v2_path(std::string_view proc_pid_cgroup);
// The container ID a cgroup path names, if one of its components holds a run of 64 hex
// digits (docker-<id>.scope, /docker/<id>, cri-containerd-<id>.scope, libpod-<id>.scope,
// crio-<id>.scope) that starts with `prefix` (lowercase hex): the full ID and the path up
// to and including that component.
struct ContainerMatch {
  std::string id;    // 64 hex digits
  std::string path;  // "/system.slice/docker-<id>.scope"
};
std::optional<ContainerMatch> match_container(std::string_view cgroup_path, std::string_view prefix);
// Syntax of --container: 12 to 64 hex digits (case-insensitive); the lowercase form.
Result<std::string> parse_container_id(const std::string& arg);

// --cgroup PATH: an absolute path, or one relative to the cgroup2 mount. Must be a
// directory on a cgroup2 file system. `mount` "" means cgroup2_mount().
Result<CgroupTarget> resolve_cgroup_path(const std::string& arg, std::string mount = "");
// --container ID: the cgroup whose path names a container whose ID starts with `id`,
// found by scanning /proc/*/cgroup (`proc` for tests). Unknown or ambiguous: an error
// naming the candidates.
Result<CgroupTarget> resolve_container(const std::string& id, const std::string& proc = "/proc",
                                       std::string mount = "");

// The tool's --cgroup/--container (at most one), resolved; none when neither was
// given. With -p PIDs, fails when none of them is inside the cgroup (both filters
// must pass, so nothing could be traced).
Result<std::optional<CgroupTarget>> resolve_cgroup_options(const CommonOptions& o,
                                                           const std::vector<uint32_t>& pids = {});

// True when process `pid` is in the cgroup or below it (its /proc/PID/cgroup).
bool pid_in_cgroup(uint32_t pid, const CgroupTarget& t);
// The processes in the cgroup and its descendants (every cgroup.procs under it), sorted,
// at most `max`.
std::vector<uint32_t> cgroup_pids(const CgroupTarget& t, size_t max = 65536);

// What start records say: {"path", "id", "container"} (container null for --cgroup);
// null when no cgroup filter.
nlohmann::json cgroup_json(const std::optional<CgroupTarget>& t);
// " in cgroup PATH (id N)" or " in container ID12 (PATH)"; "" without a filter (banners).
std::string cgroup_banner(const std::optional<CgroupTarget>& t);

// Puts the filter into `plan` (BpfPlan::cgroup_filter) and, with `task_walk`, the BTF
// offsets CGROUP_TASK_OK() reads (task_struct.cgroups, css_set.dfl_cgrp, cgroup.kn,
// cgroup.self, cgroup_subsys_state.parent, kernfs_node.id). Nothing without a target.
Status add_cgroup_filter(BpfPlan& plan, const std::optional<CgroupTarget>& t, bool task_walk);

}  // namespace bpfdiag
