"""The docs tool: the marked tables and numbers of ``README.md`` and ``docs/**/*.md``, generated from their JSON under
``docs/results/`` (:mod:`tools.docs.engine`).

    python -m tools.docs           # rewrite them
    python -m tools.docs --check   # exit 1 naming those that differ from their JSON
"""
