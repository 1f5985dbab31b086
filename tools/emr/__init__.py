"""``consumer pipeline submit``: run the Spark pipeline on EMR Serverless.

Split so that what can be checked without AWS is: :mod:`tools.emr.package` builds the archives
(files in, files out), :mod:`tools.emr.request` builds the StartJobRun request (data in, data
out), :mod:`tools.emr.fetch` is the only code that downloads (the interpreter and the wheels),
and :mod:`tools.emr.aws` the only code that calls AWS.
"""
