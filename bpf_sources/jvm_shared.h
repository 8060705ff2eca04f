/* HotSpot's own wait state, shared by bpf_sources/jvm.h and the front-ends
 * (common/jvm_state.h). Plain C. */
#ifndef BPFDIAG_JVM_SHARED_H
#define BPFDIAG_JVM_SHARED_H

/* What a JVM thread waits for, as jstack prints it */
#define JVM_WAIT_NONE 0
#define JVM_WAIT_MONITOR 1 /* "waiting to lock <monitor> (a CLASS)": synchronized */
#define JVM_WAIT_OBJECT 2  /* "waiting on <monitor> (a CLASS)": Object.wait() */
#define JVM_WAIT_PARK 3    /* "parking to wait for <blocker> (a CLASS)": LockSupport.park */

/* One JVM's layout, read from its gHotSpotVM* tables (offsets in bytes). The Java
 * object a wait is for: the JavaThread's pending or waiting ObjectMonitor (its
 * object through a WeakHandle), else its java.lang.Thread's parkBlocker field. */
struct jvm_layout {
  __u64 oop_base;   /* CompressedOops: oop = base + (narrow << shift) */
  __u64 klass_base; /* CompressedKlassPointers: Klass* = base + (narrow << shift) */
  __u32 oop_shift;
  __u32 klass_shift;
  __u32 compressed_oops;  /* UseCompressedOops: a reference field holds 4 bytes */
  __u32 compressed_klass; /* UseCompressedClassPointers: the klass word holds 4 bytes */
  __u32 thread_obj;       /* JavaThread::_threadObj (an OopHandle: oop *) */
  __u32 pending_monitor;  /* JavaThread::_current_pending_monitor */
  __u32 waiting_monitor;  /* JavaThread::_current_waiting_monitor */
  __u32 monitor_object;   /* ObjectMonitor::_object (a WeakHandle: oop *) */
  __u32 park_blocker;     /* java.lang.Thread.parkBlocker in a Thread object */
  __u32 klass_in_oop;     /* oopDesc::_metadata (the klass word) */
};

/* A Java thread's wait as a declared wait's identity (declared_shared.h: rule + 1 in
 * the top byte, at most 254 there): this tag, JVM_WAIT_* in bits 48-55 and the class
 * (a Klass *, a user address: 47 bits) below */
#define JVM_DECL_TAG 0xffULL

/* The Java object behind one wait: an ObjectMonitor * (monitor kinds) or the blocker
 * object's address (park), and its class (a Klass *) */
struct jvm_wait {
  __u64 obj;
  __u64 klass;
  __u32 kind; /* JVM_WAIT_* */
  __u32 pad;
};

#endif
