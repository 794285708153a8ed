"""Paper recipes: a published GPU system built and run on your GPU, its claims judged, one record.

A recipe is data (`recipes/<name>/recipe.toml` plus the patches and small scripts it names):
- `model`    the typed records, derived grid values, {name} placeholders;
- `read`     finds recipes and reads recipe.toml into those records (RecipeError names the file and key),
             checking the whole recipe across its sections;
- `sections` one table of a section family ([[sources]], [[inputs]], [[experiments]], [[claims]], ...) read
             into its record;
- `values`   the values build steps and experiments may use ({cuda_archs}, {cxx11_abi}, ...);
- `checks`   requirements (archs, GPU memory, host RAM, disk) before anything is built;
- `sources`  pinned sources fetched with git itself (a mirror through `url.<base>.insteadOf`), verified;
- `trees`    a build's source tree: every source made fresh, the patches applied in order;
- `pins`     the recipe's pip packages at exact versions, per target (recipes/<name>/locks/<target>.json);
- `build`    the image: target image + sources + each build step as its own cached BuildKit layer;
- `index`    whether pip's index answers before a pip layer needs it (else one sentence: the offline way);
- `manifest` what a build's image was made of, kept in the image, read back by every run;
- `experiments` each case a Job (kernellab.jobs.recipe_case) of a place; metrics, sanity patterns;
- `claims`   verdicts: the paper's numbers judged as ratios against a baseline from the same run;
- `record`   a run's record (one type, Run; its provenance kernellab.provenance's): the run folder (`record.run`:
             run.json; `record.pages`: metrics, claims, summary.md, plots, --compare);
- `profile`  `invoke recipe profile`: one case under Nsight Systems (and Nsight Compute), its summary and picture;
- `capture`  what that runs inside the recipe's image: the checks, the capture, the export;
- `reproduce` a reproduction run (build, cases, claims, record) and what goes around it (check, shell, export);
- `on_cluster`, `on_node` a run on a cluster: its job and merge, and what each node runs;
  `profile_cluster` the same for a profile.
"""
