# Run every notebook of the workshop lite site in headless Chromium, LAN mode (no service worker);
# prints one JSON line per notebook. Usage: .venv/bin/python scripts/lite_all_notebooks.py 00_sample_rhythm.ipynb ...
# (serves _build/workshop; a notebook counts as failed when an stderr output holds Error/Traceback).
import sys, time, threading, http.server, functools, json
from playwright.sync_api import sync_playwright
class Q(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *a): pass
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Q, directory="_build/workshop"))
threading.Thread(target=srv.serve_forever, daemon=True).start()
base = f"http://127.0.0.1:{srv.server_port}/"
nbs = sys.argv[1:]
with sync_playwright() as p:
    b = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
    for nb in nbs:
        ctx = b.new_context(service_workers="block", viewport={"width":1400,"height":1000})
        off=[]
        def route(r, off=off):
            u = r.request.url
            if u.startswith(base) or u.startswith(("data:","blob:")): r.continue_()
            else: off.append(u); r.abort()
        ctx.route("**/*", route)
        ctx.add_init_script("Object.defineProperty(Navigator.prototype, 'serviceWorker', {get: () => undefined});")
        page = ctx.new_page(); t0=time.time()
        try:
            page.goto(base + "lite/notebooks/index.html?path=notebooks/" + nb)
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120000)
            page.locator(".jp-Notebook").first.click()
            page.get_by_text("Run", exact=True).first.click()
            page.get_by_text("Run All Cells", exact=True).first.click()
            time.sleep(3)
            end=time.time()+240
            while time.time()<end:
                pr = page.locator(".jp-InputArea-prompt").all_inner_texts()
                if any(x.strip("[]: ") for x in pr) and not any("*" in x for x in pr): break
                time.sleep(1)
            # scroll through the windowed list to render all outputs
            page.evaluate("() => { const n=document.querySelector('.jp-WindowedPanel-outer'); if(n){n.scrollTop=0;} }")
            errs=[]
            for k in range(60):
                errs += [t[:300] for t in page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']").all_inner_texts() if 'Error' in t or 'Traceback' in t]
                done = page.evaluate("() => { const n=document.querySelector('.jp-WindowedPanel-outer'); if(!n) return true; const at=n.scrollTop; n.scrollTop += 800; return n.scrollTop===at; }")
                time.sleep(0.3)
                if done: break
            errs = list(dict.fromkeys(errs))
            print(json.dumps({"nb": nb, "s": round(time.time()-t0,1), "errors": [e.splitlines()[-1] if e.splitlines() else e for e in errs][:3], "off": len(off)}), flush=True)
        except Exception as e:
            print(json.dumps({"nb": nb, "exception": str(e)[:200]}), flush=True)
        ctx.close()
    b.close()
