import CGlibcExtras

/// Limits glibc's malloc to one arena for the rest of the process; call it before any thread starts.
///
/// glibc gives a thread that meets another in malloc an arena of its own, and each arena keeps much of
/// what was freed in it. A tool whose I/O handlers allocate on several engine threads at once grows by
/// an arena's leftovers per thread; one arena keeps its peak memory to what it holds.
package func useOneMallocArena() {
    _ = glibc_extras_limit_malloc_arenas(1)
}
