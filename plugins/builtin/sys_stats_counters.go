package builtin

// Perfetto's MeminfoCounters and VmstatCounters enum values
// (protos/perfetto/common/sys_stats_counters.proto) with the /proc names
// they stand for (include/perfetto/ext/traced/sys_stats_counters.h). The
// numbers are part of the trace format: never renumber. Entries of
// /proc/meminfo and /proc/vmstat not listed here are skipped.

// meminfoKeys maps a /proc/meminfo name to its MeminfoCounters value
// (values in kB, as in the file).
var meminfoKeys = map[string]int32{
	"MemTotal":       1,  // MEMINFO_MEM_TOTAL
	"MemFree":        2,  // MEMINFO_MEM_FREE
	"MemAvailable":   3,  // MEMINFO_MEM_AVAILABLE
	"Buffers":        4,  // MEMINFO_BUFFERS
	"Cached":         5,  // MEMINFO_CACHED
	"SwapCached":     6,  // MEMINFO_SWAP_CACHED
	"Active":         7,  // MEMINFO_ACTIVE
	"Inactive":       8,  // MEMINFO_INACTIVE
	"Active(anon)":   9,  // MEMINFO_ACTIVE_ANON
	"Inactive(anon)": 10, // MEMINFO_INACTIVE_ANON
	"Active(file)":   11, // MEMINFO_ACTIVE_FILE
	"Inactive(file)": 12, // MEMINFO_INACTIVE_FILE
	"Unevictable":    13, // MEMINFO_UNEVICTABLE
	"Mlocked":        14, // MEMINFO_MLOCKED
	"SwapTotal":      15, // MEMINFO_SWAP_TOTAL
	"SwapFree":       16, // MEMINFO_SWAP_FREE
	"Dirty":          17, // MEMINFO_DIRTY
	"Writeback":      18, // MEMINFO_WRITEBACK
	"AnonPages":      19, // MEMINFO_ANON_PAGES
	"Mapped":         20, // MEMINFO_MAPPED
	"Shmem":          21, // MEMINFO_SHMEM
	"Slab":           22, // MEMINFO_SLAB
	"SReclaimable":   23, // MEMINFO_SLAB_RECLAIMABLE
	"SUnreclaim":     24, // MEMINFO_SLAB_UNRECLAIMABLE
	"KernelStack":    25, // MEMINFO_KERNEL_STACK
	"PageTables":     26, // MEMINFO_PAGE_TABLES
	"CommitLimit":    27, // MEMINFO_COMMIT_LIMIT
	"Committed_AS":   28, // MEMINFO_COMMITED_AS
	"VmallocTotal":   29, // MEMINFO_VMALLOC_TOTAL
	"VmallocUsed":    30, // MEMINFO_VMALLOC_USED
	"VmallocChunk":   31, // MEMINFO_VMALLOC_CHUNK
	"CmaTotal":       32, // MEMINFO_CMA_TOTAL
	"CmaFree":        33, // MEMINFO_CMA_FREE
}

// vmstatKeys maps a /proc/vmstat name to its VmstatCounters value.
var vmstatKeys = map[string]int32{
	"nr_free_pages":                 1,  // VMSTAT_NR_FREE_PAGES
	"nr_alloc_batch":                2,  // VMSTAT_NR_ALLOC_BATCH
	"nr_inactive_anon":              3,  // VMSTAT_NR_INACTIVE_ANON
	"nr_active_anon":                4,  // VMSTAT_NR_ACTIVE_ANON
	"nr_inactive_file":              5,  // VMSTAT_NR_INACTIVE_FILE
	"nr_active_file":                6,  // VMSTAT_NR_ACTIVE_FILE
	"nr_unevictable":                7,  // VMSTAT_NR_UNEVICTABLE
	"nr_mlock":                      8,  // VMSTAT_NR_MLOCK
	"nr_anon_pages":                 9,  // VMSTAT_NR_ANON_PAGES
	"nr_mapped":                     10, // VMSTAT_NR_MAPPED
	"nr_file_pages":                 11, // VMSTAT_NR_FILE_PAGES
	"nr_dirty":                      12, // VMSTAT_NR_DIRTY
	"nr_writeback":                  13, // VMSTAT_NR_WRITEBACK
	"nr_slab_reclaimable":           14, // VMSTAT_NR_SLAB_RECLAIMABLE
	"nr_slab_unreclaimable":         15, // VMSTAT_NR_SLAB_UNRECLAIMABLE
	"nr_page_table_pages":           16, // VMSTAT_NR_PAGE_TABLE_PAGES
	"nr_kernel_stack":               17, // VMSTAT_NR_KERNEL_STACK
	"nr_overhead":                   18, // VMSTAT_NR_OVERHEAD
	"nr_unstable":                   19, // VMSTAT_NR_UNSTABLE
	"nr_bounce":                     20, // VMSTAT_NR_BOUNCE
	"nr_vmscan_write":               21, // VMSTAT_NR_VMSCAN_WRITE
	"nr_vmscan_immediate_reclaim":   22, // VMSTAT_NR_VMSCAN_IMMEDIATE_RECLAIM
	"nr_writeback_temp":             23, // VMSTAT_NR_WRITEBACK_TEMP
	"nr_isolated_anon":              24, // VMSTAT_NR_ISOLATED_ANON
	"nr_isolated_file":              25, // VMSTAT_NR_ISOLATED_FILE
	"nr_shmem":                      26, // VMSTAT_NR_SHMEM
	"nr_dirtied":                    27, // VMSTAT_NR_DIRTIED
	"nr_written":                    28, // VMSTAT_NR_WRITTEN
	"nr_pages_scanned":              29, // VMSTAT_NR_PAGES_SCANNED
	"workingset_refault":            30, // VMSTAT_WORKINGSET_REFAULT
	"workingset_activate":           31, // VMSTAT_WORKINGSET_ACTIVATE
	"workingset_nodereclaim":        32, // VMSTAT_WORKINGSET_NODERECLAIM
	"nr_anon_transparent_hugepages": 33, // VMSTAT_NR_ANON_TRANSPARENT_HUGEPAGES
	"nr_free_cma":                   34, // VMSTAT_NR_FREE_CMA
	"nr_swapcache":                  35, // VMSTAT_NR_SWAPCACHE
	"nr_dirty_threshold":            36, // VMSTAT_NR_DIRTY_THRESHOLD
	"nr_dirty_background_threshold": 37, // VMSTAT_NR_DIRTY_BACKGROUND_THRESHOLD
	"pgpgin":                        38, // VMSTAT_PGPGIN
	"pgpgout":                       39, // VMSTAT_PGPGOUT
	"pgpgoutclean":                  40, // VMSTAT_PGPGOUTCLEAN
	"pswpin":                        41, // VMSTAT_PSWPIN
	"pswpout":                       42, // VMSTAT_PSWPOUT
	"pgalloc_dma":                   43, // VMSTAT_PGALLOC_DMA
	"pgalloc_normal":                44, // VMSTAT_PGALLOC_NORMAL
	"pgalloc_movable":               45, // VMSTAT_PGALLOC_MOVABLE
	"pgfree":                        46, // VMSTAT_PGFREE
	"pgactivate":                    47, // VMSTAT_PGACTIVATE
	"pgdeactivate":                  48, // VMSTAT_PGDEACTIVATE
	"pgfault":                       49, // VMSTAT_PGFAULT
	"pgmajfault":                    50, // VMSTAT_PGMAJFAULT
	"pgrefill_dma":                  51, // VMSTAT_PGREFILL_DMA
	"pgrefill_normal":               52, // VMSTAT_PGREFILL_NORMAL
	"pgrefill_movable":              53, // VMSTAT_PGREFILL_MOVABLE
	"pgsteal_kswapd_dma":            54, // VMSTAT_PGSTEAL_KSWAPD_DMA
	"pgsteal_kswapd_normal":         55, // VMSTAT_PGSTEAL_KSWAPD_NORMAL
	"pgsteal_kswapd_movable":        56, // VMSTAT_PGSTEAL_KSWAPD_MOVABLE
	"pgsteal_direct_dma":            57, // VMSTAT_PGSTEAL_DIRECT_DMA
	"pgsteal_direct_normal":         58, // VMSTAT_PGSTEAL_DIRECT_NORMAL
	"pgsteal_direct_movable":        59, // VMSTAT_PGSTEAL_DIRECT_MOVABLE
	"pgscan_kswapd_dma":             60, // VMSTAT_PGSCAN_KSWAPD_DMA
	"pgscan_kswapd_normal":          61, // VMSTAT_PGSCAN_KSWAPD_NORMAL
	"pgscan_kswapd_movable":         62, // VMSTAT_PGSCAN_KSWAPD_MOVABLE
	"pgscan_direct_dma":             63, // VMSTAT_PGSCAN_DIRECT_DMA
	"pgscan_direct_normal":          64, // VMSTAT_PGSCAN_DIRECT_NORMAL
	"pgscan_direct_movable":         65, // VMSTAT_PGSCAN_DIRECT_MOVABLE
	"pgscan_direct_throttle":        66, // VMSTAT_PGSCAN_DIRECT_THROTTLE
	"pginodesteal":                  67, // VMSTAT_PGINODESTEAL
	"slabs_scanned":                 68, // VMSTAT_SLABS_SCANNED
	"kswapd_inodesteal":             69, // VMSTAT_KSWAPD_INODESTEAL
	"kswapd_low_wmark_hit_quickly":  70, // VMSTAT_KSWAPD_LOW_WMARK_HIT_QUICKLY
	"kswapd_high_wmark_hit_quickly": 71, // VMSTAT_KSWAPD_HIGH_WMARK_HIT_QUICKLY
	"pageoutrun":                    72, // VMSTAT_PAGEOUTRUN
	"allocstall":                    73, // VMSTAT_ALLOCSTALL
	"pgrotated":                     74, // VMSTAT_PGROTATED
	"drop_pagecache":                75, // VMSTAT_DROP_PAGECACHE
	"drop_slab":                     76, // VMSTAT_DROP_SLAB
	"pgmigrate_success":             77, // VMSTAT_PGMIGRATE_SUCCESS
	"pgmigrate_fail":                78, // VMSTAT_PGMIGRATE_FAIL
	"compact_migrate_scanned":       79, // VMSTAT_COMPACT_MIGRATE_SCANNED
	"compact_free_scanned":          80, // VMSTAT_COMPACT_FREE_SCANNED
	"compact_isolated":              81, // VMSTAT_COMPACT_ISOLATED
	"compact_stall":                 82, // VMSTAT_COMPACT_STALL
	"compact_fail":                  83, // VMSTAT_COMPACT_FAIL
	"compact_success":               84, // VMSTAT_COMPACT_SUCCESS
	"compact_daemon_wake":           85, // VMSTAT_COMPACT_DAEMON_WAKE
	"unevictable_pgs_culled":        86, // VMSTAT_UNEVICTABLE_PGS_CULLED
	"unevictable_pgs_scanned":       87, // VMSTAT_UNEVICTABLE_PGS_SCANNED
	"unevictable_pgs_rescued":       88, // VMSTAT_UNEVICTABLE_PGS_RESCUED
	"unevictable_pgs_mlocked":       89, // VMSTAT_UNEVICTABLE_PGS_MLOCKED
	"unevictable_pgs_munlocked":     90, // VMSTAT_UNEVICTABLE_PGS_MUNLOCKED
	"unevictable_pgs_cleared":       91, // VMSTAT_UNEVICTABLE_PGS_CLEARED
	"unevictable_pgs_stranded":      92, // VMSTAT_UNEVICTABLE_PGS_STRANDED
	"nr_zspages":                    93, // VMSTAT_NR_ZSPAGES
	"nr_ion_heap":                   94, // VMSTAT_NR_ION_HEAP
	"nr_gpu_heap":                   95, // VMSTAT_NR_GPU_HEAP
}
