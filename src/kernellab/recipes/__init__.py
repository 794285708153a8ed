"""Paper recipes: a published GPU system built and run on your GPU, its claims judged, one record.

A recipe is data (`recipes/<name>/recipe.toml` plus the patches and small scripts it names):
- `model`    the typed records, derived grid values, {name} placeholders;
- `read`     finds recipes and reads recipe.toml into those records (RecipeError names the file and key);
- `values`   the values build steps and experiments may use ({cuda_archs}, {cxx11_abi}, ...);
- `checks`   requirements (archs, GPU memory, host RAM, disk) before anything is built;
- `sources`  pinned sources fetched with git itself (a mirror through `url.<base>.insteadOf`), verified,
             patched into a build context;
- `build`    the image: target image + sources + each build step as its own cached BuildKit layer;
- `experiments` runs the cases in the built image, extracts metrics, applies sanity patterns;
- `claims`   verdicts: the paper's numbers judged as ratios against a baseline from the same run;
- `record`   the run folder (provenance, raw output, metrics, claims, summary.md, plot) and --compare.
"""
