"""Record storage: records and views (:mod:`.records`), the records file and its mapping
(:mod:`.records_file`), sharing across local ranks (:mod:`.sharing`) and the on-disk cache
(:mod:`.cache`). Nothing here knows of catalogs or metadata: callers pass a ``build``
function returning ``(records, extra)``, ``extra`` a data-only dict kept with the records.
"""
