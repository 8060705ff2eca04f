/* HotSpot's own wait state: what jstack prints for a blocked Java thread (the monitor
 * it waits to lock or waits on, the object it parks for), read from the JVM at the
 * moment the thread waits. Pasted into a tool's program text (common/bpf_text).
 * The front-end (common/jvm_state) fills jvm_layouts for each JVM it found and
 * jvm_threads (tid -> JavaThread *) from the JVM's own thread list.
 * The reads are of the waiting thread's own process (current), at its wait. */
#include "jvm_shared.h"

#ifndef JVM_THREADS
#define JVM_THREADS 16384
#endif
BPFDIAG_HASH_LAZY(jvm_layouts, u32, struct jvm_layout, 256); /* tgid -> its JVM's layout */
BPFDIAG_HASH_LAZY(jvm_threads, u32, u64, JVM_THREADS);       /* tid -> its JavaThread */

static inline u64 jvm_read_ptr(u64 addr) {
  u64 v = 0;
  if (addr)
    bpf_probe_read_user(&v, sizeof(v), (void *)addr);
  return v;
}

static inline u64 jvm_read_ref(struct jvm_layout *l, u64 addr) {
  if (!l->compressed_oops)
    return jvm_read_ptr(addr);
  u32 n = 0;
  bpf_probe_read_user(&n, sizeof(n), (void *)addr);
  return n ? l->oop_base + ((u64)n << l->oop_shift) : 0;
}

static inline u64 jvm_klass_of(struct jvm_layout *l, u64 obj) {
  if (!obj)
    return 0;
  if (!l->compressed_klass)
    return jvm_read_ptr(obj + l->klass_in_oop);
  u32 n = 0;
  bpf_probe_read_user(&n, sizeof(n), (void *)(obj + l->klass_in_oop));
  return n ? l->klass_base + ((u64)n << l->klass_shift) : 0;
}

/* What the current thread (tid of process pid) waits for, when it is a Java thread of
 * a JVM the front-end described; w->kind JVM_WAIT_NONE otherwise. */
static inline void jvm_wait_of(u32 pid, u32 tid, struct jvm_wait *w) {
  w->kind = JVM_WAIT_NONE;
  /* the process first: a small map, its few buckets stay in cache, and most threads
   * are not Java threads (jvm_threads, keyed by tid, is large: a cold bucket each) */
  struct jvm_layout *l = jvm_layouts.lookup(&pid);
  if (!l)
    return;
  u64 *jt = jvm_threads.lookup(&tid);
  if (!jt)
    return;
  u64 t = *jt;
  u64 m = jvm_read_ptr(t + l->pending_monitor);
  u32 kind = JVM_WAIT_MONITOR;
  if (!m) {
    m = jvm_read_ptr(t + l->waiting_monitor);
    kind = JVM_WAIT_OBJECT;
  }
  if (m) {
    w->obj = m;
    w->klass = jvm_klass_of(l, jvm_read_ptr(jvm_read_ptr(m + l->monitor_object)));
    w->kind = kind;
    return;
  }
  u64 thread_oop = jvm_read_ptr(jvm_read_ptr(t + l->thread_obj));
  if (!thread_oop)
    return;
  u64 b = jvm_read_ref(l, thread_oop + l->park_blocker);
  if (!b)
    return;
  w->obj = b;
  w->klass = jvm_klass_of(l, b);
  w->kind = JVM_WAIT_PARK;
}

/* The current Java thread's wait as a declared wait's identity (0: none): what it waits
 * for and the class of the object, as offcputime keys its periods. */
static inline u64 jvm_declared_raw(u32 pid, u32 tid) {
  struct jvm_wait w = {};
  jvm_wait_of(pid, tid, &w);
  if (w.kind == JVM_WAIT_NONE)
    return 0;
  return (JVM_DECL_TAG << 56) | ((u64)w.kind << 48) | (w.klass & 0xffffffffffffULL);
}
