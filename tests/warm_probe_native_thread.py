"""A module that starts a native thread when imported, one Python's ``threading`` does not list (faulthandler's
watchdog): a warm process that imports it must stop forking all the same."""
import faulthandler

faulthandler.dump_traceback_later(3600)
