"""A module that starts a thread when imported: a warm process that imports it must stop forking."""
import threading
import time

threading.Thread(target=time.sleep, args=(60,), name="started-by-an-import", daemon=True).start()
