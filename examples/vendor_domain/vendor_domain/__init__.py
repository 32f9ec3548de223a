"""vendor_domain: an engine vendor's kernels written for its engine's call sites, checked within the
domain they declare and by the rule dialect they follow."""
