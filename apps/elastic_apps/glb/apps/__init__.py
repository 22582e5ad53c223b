"""The seed's GLB benchmark programs: UTS, N-Queens, Monte-Carlo Pi, Betweenness
Centrality. Each runs as `python -m elastic_apps.glb.apps.NAME ...` inside an elastic job
(rigid or malleable), or with `--sequential` in one process as a reference."""
