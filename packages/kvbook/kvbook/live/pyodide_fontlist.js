// Matplotlib's font list, built once inside the vendored Pyodide (run by
// packages/kvbook/kvbook/live/vendor_pyodide.py):  node packages/kvbook/kvbook/live/pyodide_fontlist.js CACHE_DIR OUT_FILE
// The page writes it into matplotlib's cache directory before the chapter's code
// imports matplotlib, which then skips "building the font cache" (about 2 s).
// Its font paths are relative to matplotlib's mpl-data, the same in every Pyodide.
"use strict";
const path = require("path");
const fs = require("fs");
const { loadPyodide } = require(path.resolve(process.argv[2], "pyodide.js"));
(async () => {
  const py = await loadPyodide({indexURL: path.resolve(process.argv[2]) + "/",
                                env: {HOME: "/home/pyodide", MPLBACKEND: "Agg", MPLCONFIGDIR: "/home/pyodide/.mpl"},
                                stdout: () => {}, stderr: () => {}});
  await py.loadPackage(["numpy", "matplotlib"], {messageCallback: () => {}});
  const name = py.runPython(`
import matplotlib.font_manager as fm
fm.json_dump(fm.fontManager, "/tmp/fontlist.json")
"fontlist-v%s.json" % fm.FontManager.__version__
`);
  fs.writeFileSync(process.argv[3], py.FS.readFile("/tmp/fontlist.json"));
  console.log(name);
})().catch((e) => { console.error(String(e)); process.exit(1); });
