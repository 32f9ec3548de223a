"""Stage records, one module per family; each module exports `STAGES`."""
