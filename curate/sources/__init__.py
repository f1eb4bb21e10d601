"""Sources: where reference programs come from (KernelBench folders, tables, repositories)."""
